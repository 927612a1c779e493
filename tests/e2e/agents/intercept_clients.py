"""A tool-using script with no forkpoint in it: requests, httpx, aiohttp and curl calls to
HTTPS tool services, each configured only by the environment (HTTPS_PROXY, CA bundles).

    python intercept_clients.py SEARCH_URL REFUNDS_URL   # prints one JSON line per call
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import httpx
import requests


async def with_aiohttp(url: str) -> str:
    async with aiohttp.ClientSession(trust_env=True) as session, session.get(url) as response:
        return await response.text()


def curl(url: str) -> str:
    return subprocess.run(
        ["curl", "-sS", "--fail", url], capture_output=True, text=True, check=True
    ).stdout


def main(search: str, refunds: str) -> None:
    answers = {
        "requests": requests.get(f"{search}/v1/search?q=requests", timeout=10).text,
        "httpx": httpx.get(f"{search}/v1/search?q=httpx", timeout=10).text,
        "aiohttp": asyncio.run(with_aiohttp(f"{search}/v1/search?q=aiohttp")),
        "curl": curl(f"{search}/v1/search?q=curl"),
        "refund": requests.post(f"{refunds}/v1/refund", json={"order": "A1"}, timeout=10).text,
    }
    for client, body in answers.items():
        print(json.dumps({"client": client, "body": json.loads(body)}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
