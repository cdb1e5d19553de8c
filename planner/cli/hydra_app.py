"""`modelplan-job`: modelplan as a plain Hydra application, one job per call, so any Hydra
launcher (basic, joblib, submitit, ray, or modelplan) can run sweeps. Jobs share the store,
whose locks build every key once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from planner.config.compose import CONF_DIR
from planner.errors import ModelplanError


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def job(cfg: DictConfig) -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig

    from planner.cli.app import RunOptions, run_plan
    from planner.planning import plan_for
    from planner.render.run import table

    config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        _check_user_tree(config)
        ir = plan_for(config).to_json()
        record = run_plan(ir, out_dir / "result", list(HydraConfig.get().overrides.task),
                          RunOptions(quiet=True))
    except ModelplanError as exc:
        for line in exc.lines:
            print(f"modelplan: error: {line}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    sys.stdout.write(table(record))
    if record["error"]:
        raise SystemExit(f"modelplan: error: {record['error']['message']}")
    return {"status": record["status"], "run_id": record["run_id"]}


def _check_user_tree(config: dict[str, Any]) -> None:
    """With --config-dir / hydra.searchpath, the checks `modelplan plan` makes: no shadowed
    files, and config errors that name the user's file."""
    from hydra.core.hydra_config import HydraConfig

    from planner.config.conftree import from_hydra
    from planner.config.provenance import check_with_files

    tree = from_hydra(HydraConfig.get())
    if not tree.packaged_only:
        tree.check()
        check_with_files(config, tree, list(HydraConfig.get().overrides.task))


def main() -> None:
    job()


if __name__ == "__main__":
    main()
