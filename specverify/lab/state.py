"""The lab's resumable state: every measured unit is saved to a JSON file as soon as it is done, keyed
by a hash of the configuration, so an interrupted lab resumes where it stopped."""

from __future__ import annotations

import json
import os

from specverify.io import write_json

from .config import LabConfig


class State:
    """Units of measurement, saved after each one (atomic JSON write)."""

    def __init__(self, path: str | None, config: LabConfig, fresh: bool = False):
        self.path = path
        self.units: dict = {}
        self.key = config.key()
        if path and os.path.exists(path) and not fresh:
            try:
                with open(path) as f:
                    saved = json.load(f)
                if saved.get("key") == self.key:
                    self.units = saved.get("units", {})
            except (OSError, json.JSONDecodeError):
                self.units = {}

    def done(self, unit: str) -> bool:
        return unit in self.units

    def put(self, unit: str, value) -> None:
        self.units[unit] = value
        if self.path:
            write_json(self.path, {"key": self.key, "units": self.units})


def default_state_path(config: LabConfig) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "specverify", f"lab-{config.key()}.json")
