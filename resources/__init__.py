"""Dagster resources: one per module."""
