"""Automation of the platform: the landing sensor and the declarative conditions downstream (docs/ui.md)."""
