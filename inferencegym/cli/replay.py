"""``inferencegym replay``: send a workload to a real OpenAI-compatible server and compare it with the
simulator's prediction for the same requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from inferencegym.cli.errors import fail, one_line
from inferencegym.cli.validation import check_output_path
from inferencegym.envs import get_task
from inferencegym.tasks.episode_workload import generate_episode_workload
from inferencegym.workload import Workload, load_any
from inferencegym.workload.prefix_stats import prefix_stats
from inferencegym.workload.prompt_text import workload_prompts


def _chains_of_replayed(wl, n: int, max_prompt_tokens: int, block_tokens: int):
    """Simulator block hashes and the infinite-cache hit bound of the first ``n`` requests as
    replayed (prompts clipped to ``max_prompt_tokens``)."""
    import numpy as np

    B = wl.hash_block_tokens
    p = np.clip(wl.prompt_tokens[:n], 1, max_prompt_tokens)
    chains = [h[: -(-int(x) // B)] for h, x in zip(wl.hash_ids[:n], p.tolist())]
    sub = Workload.from_arrays(wl.arrival_s[:n], p, np.maximum(wl.output_tokens[:n], 1), hash_ids=chains,
                               hash_block_tokens=B, sort=False)
    hashes = [r.block_hashes for r in sub.to_requests(block_size=block_tokens)]
    return hashes, prefix_stats(sub, block_tokens=block_tokens)["hit_bound"]


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay(
        endpoint: str = typer.Option(..., help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"),
        model: str = typer.Option(..., help="model name the server expects"),
        trace: Optional[Path] = typer.Option(None, help="workload: a trace CSV or a Parquet pool "
                                                        "(inferencegym.workload loaders)"),
        task: Optional[str] = typer.Option(None, help="workload: one episode of this task's generator"),
        seed: int = typer.Option(0, min=0, help="seed of the task workload and of the prompt text"),
        max_requests: int = typer.Option(200, min=1, help="send at most this many requests"),
        concurrency: int = typer.Option(16, min=1, max=4096, help="requests in flight at most"),
        time_scale: float = typer.Option(1.0, help="multiply arrival times (0.5 = twice the rate)"),
        api: str = typer.Option("chat", help="chat (/chat/completions) or completions (/completions)"),
        ignore_eos: bool = typer.Option(False, help="vLLM: force exactly output_tokens tokens"),
        timeout_s: float = typer.Option(300.0, help="per-request timeout"),
        max_prompt_tokens: int = typer.Option(8192, min=1, help="clip prompts to this (stated clip)"),
        max_output_tokens: int = typer.Option(1024, min=1, help="clip max_tokens to this (stated clip)"),
        warmup: bool = typer.Option(True, help="send one untimed 1-token request first"),
        sim: bool = typer.Option(True, help="also run the simulator on the same requests and compare"),
        sim_model: Optional[str] = typer.Option(None, help="simulator model preset (default: the task's, "
                                                           "else llama-2-7b)"),
        sim_gpu: Optional[str] = typer.Option(None, help="simulator GPU preset (default: task's, else a100-80gb)"),
        sim_tp: Optional[int] = typer.Option(None, help="tensor parallelism of the simulated replicas"),
        sim_replicas: Optional[int] = typer.Option(None, help="simulated replicas"),
        sim_batch_cap: Optional[int] = typer.Option(None, help="simulated batch cap (max_num_seqs)"),
        sim_scheduler: Optional[str] = typer.Option(None, help="vllm, sarathi or static"),
        block_tokens: int = typer.Option(16, min=1, help="engine KV block size: prompts of traces with hash "
                                                         "chains are built block-aligned at this size"),
        output: Optional[Path] = typer.Option(None, help="write the per-request records (Parquet)"),
        json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
    ) -> None:
        """Replay a workload as real streamed requests (paced by arrival time, bounded in count and
        concurrency), record TTFT and inter-token times, and compare with the simulator."""
        import numpy as np
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from inferencegym.apps.replay import (  # lazy: imports Ray / torch (~5 s); not at start-up
            ReplayConfig,
            SimTarget,
            compare,
            prepare_workload,
            render,
            run_replay,
            simulate,
        )

        console = Console(stderr=json_out)
        if (trace is None) == (task is None):
            raise typer.BadParameter("give exactly one workload: --trace PATH or --task ID")
        if output is not None:  # before any request is sent: not a folder, not the trace, folder exists

            check_output_path(output, inputs=[trace])
        try:
            cfg = ReplayConfig(endpoint=endpoint, model=model, max_requests=max_requests,
                               concurrency=concurrency, time_scale=time_scale, api=api,
                               ignore_eos=ignore_eos, request_timeout_s=timeout_s,
                               max_prompt_tokens=max_prompt_tokens,
                               max_output_tokens=max_output_tokens, seed=seed, warmup=warmup)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

        overrides = dict(model=sim_model, gpu=sim_gpu, tensor_parallel=sim_tp, replicas=sim_replicas,
                         batch_cap=sim_batch_cap, scheduler=sim_scheduler)
        if task is not None:
            try:
                spec = get_task(task)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
            wl = generate_episode_workload(spec, np.random.default_rng(seed))
            source = f"task {task} seed {seed}"
            target = SimTarget.from_task(task, **overrides)
        else:
            if not trace.exists():
                raise typer.BadParameter(f"trace file not found: {trace}")
            wl = load_any(trace)
            source = str(trace)
            target = SimTarget(**{k: v for k, v in overrides.items() if v is not None})
        a, p, o, clipped = prepare_workload(wl.arrival_s, wl.prompt_tokens, wl.output_tokens, cfg)
        prompts = hashes = hit_bound = None
        if getattr(wl, "hash_ids", None) is not None:  # same hash -> same text, block-aligned (prefix caching sees the sharing)

            prompts = workload_prompts(wl, len(wl), max_prompt_tokens=max_prompt_tokens,
                                       block_tokens=block_tokens, seed=seed)
            hashes, hit_bound = _chains_of_replayed(wl, len(a), max_prompt_tokens, block_tokens)
        console.print(f"replaying {len(a)} requests from {source} over {a[-1] * time_scale:.1f} s "
                      f"to {endpoint} (model {model}, concurrency {concurrency})")
        if clipped["prompts"] or clipped["outputs"]:
            console.print(f"clipped: {clipped['prompts']} prompts to {max_prompt_tokens} tokens, "
                          f"{clipped['outputs']} outputs to {max_output_tokens} tokens")

        with Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=json_out) as prog:
            bar = prog.add_task("replay", total=len(a))
            try:
                result = run_replay(wl.arrival_s, wl.prompt_tokens, wl.output_tokens, cfg,
                                    on_done=lambda: prog.advance(bar), prompts=prompts)
            except ConnectionError as exc:
                fail(one_line(exc))
        sim_table = None
        if sim:
            sim_table = simulate(a * time_scale, p, o, target, block_hashes=hashes)
        report = compare(result.records, sim_table, result.itl_s, engine_prefix=result.engine_prefix,
                         hit_bound=hit_bound)
        report.update(source=source, endpoint=endpoint, model=model, wall_s=result.wall_s,
                      clipped=clipped, sim_target=target.to_dict() if sim else None)
        if output is not None:
            result.write_parquet(str(output))
            console.print(f"records written to {output}")
        if json_out:
            typer.echo(json.dumps(report, indent=2))
        else:
            render(report, console)
        if report["failed"] == report["requests"]:
            raise typer.Exit(1)
