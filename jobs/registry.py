"""The experiment kinds the runners, CLI and pages may launch (defined in :mod:`ema_core.experiments`)."""
from ema_core.experiments import REGISTRY, build_config, config_error, get_experiment

__all__ = ["REGISTRY", "build_config", "config_error", "get_experiment"]
