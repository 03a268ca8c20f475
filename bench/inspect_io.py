"""The I/O-bound workload of bench/bench_concurrency.py, run by Inspect AI: N samples, each
making CALLS model calls to a model that answers after LATENCY seconds, MAX samples at once.

Run with a Python that has ``inspect-ai`` installed (its own environment; not a dependency):

    python bench/inspect_io.py N LATENCY CALLS MAX LOG_DIR
"""

import asyncio
import sys
import time

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelAPI, ModelOutput, modelapi
from inspect_ai.scorer import match
from inspect_ai.solver import solver

N, LATENCY, CALLS, MAX, LOG_DIR = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


@modelapi(name="slowecho")
def slowecho():
    class SlowEcho(ModelAPI):
        async def generate(self, input, tools, tool_choice, config):
            await asyncio.sleep(LATENCY)  # the model's latency
            return ModelOutput.from_content(model=self.model_name, content="done")

    return SlowEcho


@solver
def calls():
    async def solve(state, generate):
        for _ in range(CALLS):
            state = await generate(state)
        return state

    return solve


if __name__ == "__main__":
    task = Task(dataset=[Sample(input=f"case {i}", target="done", id=f"case_{i:06d}") for i in range(N)],
                solver=calls(), scorer=match())
    t0 = time.perf_counter()
    logs = eval(task, model="slowecho/model", max_samples=MAX, max_connections=MAX, log_dir=LOG_DIR,
                display="none")
    elapsed = time.perf_counter() - t0
    samples = logs[0].results.total_samples if logs and logs[0].results else 0
    print(f"{elapsed:.3f} {samples} {logs[0].status}")
