"""The secret-bearing de-identification settings: pseudonym key, profile options, issuer namespaces, OCR."""

from __future__ import annotations

from dagster import ConfigurableResource

from imaging.deid.pixel_text import PixelTextSettings, load_pixel_text_settings
from imaging.issuers import IssuerPolicy
from imaging.pseudonym import Pseudonymizer


class Deidentifier(ConfigurableResource):
    """Configured from IMAGING_PSEUDONYM_KEY through `EnvVar`, so the UI shows the name, never the key."""

    pseudonym_key: str
    options: list[str]
    issuers: dict  # platform/issuers.yaml, as loaded by imaging.config
    pixel_text: dict  # platform/pixel_text.yaml

    def issuer_policy(self) -> IssuerPolicy:
        return IssuerPolicy.from_dict(self.issuers)

    def pixel_text_settings(self) -> PixelTextSettings:
        return load_pixel_text_settings(self.pixel_text)

    def pseudonymizer(self) -> Pseudonymizer:
        return Pseudonymizer(self.pseudonym_key)
