"""`forkpoint worker`: take jobs from the queue in the store's database and run them.

`agents` reads which agents this worker may run (its own configuration: a job only names one);
`handlers` says what each kind of job means, calling the same API the local commands call;
`worker` runs procrastinate's worker over them, with forkpoint's recovery of jobs a lost
worker left running.
"""

from forkpoint.workers.agents import Agent, parse_agents
from forkpoint.workers.worker import Worker

__all__ = ["Agent", "Worker", "parse_agents"]
