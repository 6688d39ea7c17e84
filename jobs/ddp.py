"""One job over several processes: ``torchrun`` launches this on every rank.

    torchrun --nproc_per_node=N -m jobs.ddp KIND [--preset P] [--set key=value ...] [--seed S] [--json]

Every rank builds the same config; rank 0 owns the run folder (the run id is the one ``emalab run``
would give: the same config is the same run, and a failed or cancelled one resumes from its
checkpoint), runs the experiment through the ordinary worker, and ingests the result.  The other
ranks run the same experiment with a reporter that writes nothing; the experiment itself joins the
process group (gloo on CPU, NCCL on GPU) and wraps its model in DistributedDataParallel.  A cancel
from the app or the CLI reaches rank 0's reporter, and the training loop stops every rank at the
same step.  Only experiments that use the process group gain from this (``lm``); others run on
every rank alike.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch.distributed as dist

from ema_core.experiments import build_config, get_experiment
from ema_core.lm.train import init_distributed
from ema_core.protocol import NullReporter
from ema_core.rundir import RESUMABLE_STATES, RunDir, current_kind, now_iso
from jobs.cli import jsonable, parse_sets
from jobs.worker import run_job
from store import StoreError, ingest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="torchrun ... -m jobs.ddp", description=__doc__.split("\n")[0])
    ap.add_argument("kind")
    ap.add_argument("--preset")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        cfg = build_config(args.kind, preset=args.preset, overrides=parse_sets(args.set), seed=args.seed)
    except ValueError as exc:
        print(f"jobs.ddp: error: {exc}", file=sys.stderr)
        return 2
    rank, world, _ = init_distributed()  # the group first: rank 0's decision below reaches every rank
    config_json = cfg.model_dump(mode="json")
    kind = current_kind(args.kind)
    rd = RunDir.for_settings(kind, config_json, int(config_json["seed"]))
    run_id = rd.run_id
    decision = [None]
    if rank == 0:
        fresh = not rd.exists()
        rd.create(kind, config_json, int(config_json["seed"]), preset=args.preset)
        state = "queued" if fresh else rd.read_status().get("state")
        if fresh or state in RESUMABLE_STATES:
            rd.write_status(state="queued", queued_at=now_iso(), preset=args.preset, world_size=world)
            state = "queued"
        decision = [state]
    if world > 1:
        dist.broadcast_object_list(decision, src=0)
    if decision[0] != "queued":  # done, or running elsewhere: nothing to do on any rank
        _leave_group()
        if rank == 0:
            print(json.dumps({"run_id": run_id, "state": decision[0]}) if args.json else f"{run_id}: {decision[0]}")
        return 0 if decision[0] == "done" else 1
    if rank != 0:
        # The same computation, nothing written: rank 0 keeps the run folder and the checkpoints.
        get_experiment(args.kind).run(cfg, NullReporter())
        _leave_group()
        return 0
    final = run_job(run_id, backend="torchrun")
    _leave_group()
    ingested = True
    try:
        ingest(run_ids=[run_id])
    except (StoreError, OSError) as exc:
        ingested = False
        print(f"jobs.ddp: the run finished but could not be added to the store: {exc}", file=sys.stderr)
    result = rd.read_result() or {}
    record = {**(result.get("summary") or {}), "run_id": run_id, "state": final, "ingested": ingested,
              "path": str(rd.path)}
    print(json.dumps(jsonable(record)) if args.json else f"{run_id}: {final}")
    return 0 if final == "done" and ingested else 1


def _leave_group() -> None:
    if dist.is_available() and dist.is_initialized():
        # Every rank arrives before any leaves: a rank that tore its gloo pairs down while its peer was
        # still finishing its last exchange was aborted once ("terminate called without an active
        # exception", SIGABRT) on a 2-core machine at load 10.
        if dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
