"""Scenario scripts: one module per scenario (they arrive with the agents issue)."""
