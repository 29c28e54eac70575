"""The secret-bearing de-identification settings: pseudonym key, profile options, issuer namespaces, OCR."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext

from imaging.deid.pixel_text import PixelTextSettings, load_pixel_text_settings
from imaging.issuers import IssuerPolicy
from imaging.pseudonym import Pseudonymizer, check_key, key_fingerprint


class Deidentifier(ConfigurableResource):
    """Configured from IMAGING_PSEUDONYM_KEY through `EnvVar`, so the UI shows the name, never the key.

    The key is checked (`imaging.pseudonym.check_key`: at least 32 bytes) when a run sets the resource
    up, before any step starts a Spark session, and again wherever it is used.
    """

    pseudonym_key: str
    options: list[str]
    issuers: dict  # platform/issuers.yaml, as loaded by imaging.driver.config
    pixel_text: dict  # platform/pixel_text.yaml

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.key  # a short or missing key fails the run here, naming the variable and never the key

    @property
    def key(self) -> str:
        """The checked key: what the de-identification tasks carry to the executors."""
        return check_key(self.pseudonym_key)

    @property
    def key_fingerprint(self) -> str:
        """Which key this run uses, never the key (`imaging.pseudonym.key_fingerprint`)."""
        return key_fingerprint(self.key)

    def run_metadata(self) -> dict[str, str]:
        """What every image asset's materialization records about the key: its fingerprint only."""
        return {"pseudonym_key_fingerprint": self.key_fingerprint}

    def issuer_policy(self) -> IssuerPolicy:
        return IssuerPolicy.from_dict(self.issuers)

    def pixel_text_settings(self) -> PixelTextSettings:
        return load_pixel_text_settings(self.pixel_text)

    def pseudonymizer(self) -> Pseudonymizer:
        return Pseudonymizer(self.key)
