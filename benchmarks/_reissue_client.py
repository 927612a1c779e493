"""The benchmark's agent: reissues the requests of a recorded run, in order, with the openai SDK.

It writes when it was ready (imports done) and when it sent its first request, so start-up and
the replayed prefix can be told apart.
"""

import json
import sys
import time

import openai

ready = time.time()
with open(sys.argv[1]) as file:
    bodies = json.loads(file.read())
first_sent = None
with openai.OpenAI(max_retries=0) as client:
    for body in bodies:
        first_sent = first_sent or time.time()
        client.chat.completions.create(**body)
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as file:
        file.write(json.dumps({"ready": ready, "first_sent": first_sent}))
