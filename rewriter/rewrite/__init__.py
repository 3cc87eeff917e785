"""Rewriting: the one pass engine that applies rules, and the per-target planner."""
