# temporary: c=32 only, with py-spy attached to one target
import asyncio, subprocess, sys, tempfile, time
from pathlib import Path
import _procs, _workload
from _workload import concurrent, new_client, sdk_request

async def main(which: str, out: str, seconds: float) -> None:
    tmp = Path(tempfile.mkdtemp())
    up = _procs.upstream(tmp, 0.02); url = up.ready()
    if which == "minimal":
        child = _procs.minimal(tmp, url, uvloop=True)
    else:
        child = _procs.forkpoint("record", tmp, mode="record", cassette=tmp / "r.db", run="bench", upstream_url=url)
    target = child.ready()
    headers = sdk_request("headers", 0)[0]
    bodies = [sdk_request("c32", i)[1] for i in range(2000)]
    async with new_client() as client:
        await concurrent(client, target, bodies[:500], 32, headers)
        spy = subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--gil", "-s", "-r", "400", "-d", str(int(seconds)), "-f", "raw", "-o", out, "--pid", str(child.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)
        cpu0 = child.cpu(); n = 0; t0 = time.monotonic()
        while spy.poll() is None:
            await concurrent(client, target, bodies, 32, headers); n += len(bodies)
        await child.settle()
        print(which, "requests", n, "cpu us/req", round((child.cpu()-cpu0)/n*1e6, 1))
    child.stop(); up.stop()

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
