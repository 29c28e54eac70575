"""The secret-bearing de-identification settings: pseudonym key, issuer default, profile options."""

from __future__ import annotations

from dagster import ConfigurableResource

from imaging.pseudonym import Pseudonymizer


class Deidentifier(ConfigurableResource):
    """Configured from IMAGING_PSEUDONYM_KEY through `EnvVar`, so the UI shows the name, never the key."""

    pseudonym_key: str
    default_issuer: str
    options: list[str]

    def pseudonymizer(self) -> Pseudonymizer:
        return Pseudonymizer(self.pseudonym_key)
