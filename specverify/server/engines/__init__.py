"""Launchers of real OpenAI-compatible servers (`base.EngineLauncher`), one module per engine."""
