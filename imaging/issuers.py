"""Issuer namespaces of patient ids, from configuration (platform/issuers.yaml), not from each file.

Pseudonyms, UIDs' patient keys and date/time offsets are keyed on (namespace, patient id). The
namespace comes from the site: each site names the issuer of its patient ids (both sites of a
trust issue NHS numbers: namespace `NHS`, so one NHS number seen at two sites is one patient).
A file's IssuerOfPatientID is only compared with it, through an alias table of the values
devices write ("NHS", "NHSNUMBER", a trust code, ...). A value that is unknown, or that names
another namespace, never splits a patient: the site's namespace wins, and the resolution says
so (`status`), for the run to count. Pure: a dict in, named records out.

    policy = IssuerPolicy.from_model(load_file("issuers.yaml"))   # imaging.driver.platform_files
    resolution = policy.resolve("site-a", ds.get("IssuerOfPatientID"))
    resolution.namespace   # "NHS"
    resolution.status      # "configured" | "alias" | "absent" | "unknown" | "inconsistent"
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import model_validator

from imaging.config_model import SiteKey, StrictModel, Text, validate

CONFIGURED = "configured"  # the header names the site's namespace itself
ALIAS = "alias"  # the header is an alias of the site's namespace
ABSENT = "absent"  # the header is empty or missing
UNKNOWN = "unknown"  # the header is in no alias table: counted, the site's namespace used
INCONSISTENT = "inconsistent"  # the header names another namespace: counted, the site's namespace used
STATUSES = (CONFIGURED, ALIAS, ABSENT, UNKNOWN, INCONSISTENT)
SUSPECT = (UNKNOWN, INCONSISTENT)  # the statuses a run reports as a warning

_SPACE = re.compile(r"\s+")


def normalise(value: str | None) -> str:
    """Header values compare case-, padding- and space-insensitively ("nhs  number " == "NHS NUMBER")."""
    return _SPACE.sub(" ", str(value or "").replace("\x00", " ")).strip().upper()


class IssuersFile(StrictModel):
    """platform/issuers.yaml: each site's namespace and the alias table."""

    sites: dict[SiteKey, Text] = {}
    default_namespace: Text | None = None  # for sites not listed; absent: an unlisted site is an error
    aliases: dict[Text, Text] = {}  # IssuerOfPatientID value -> namespace

    @model_validator(mode="after")
    def _consistent(self):
        if not self.sites and self.default_namespace is None:
            raise ValueError("no site has a namespace (give `sites` or `default_namespace`)")
        seen: dict[str, str] = {}
        for value, namespace in self.aliases.items():
            key = normalise(value)
            if seen.get(key, namespace.strip()) != namespace.strip():
                raise ValueError(f"aliases: header value {value!r} is given to two namespaces")
            seen[key] = namespace.strip()
        for namespace in {n.strip() for n in [*self.sites.values(), self.default_namespace] if n}:
            if seen.setdefault(normalise(namespace), namespace) != namespace:
                raise ValueError(f"namespace {namespace!r} is an alias of another namespace")
        return self


@dataclass(frozen=True)
class IssuerResolution:
    """Which namespace a file's patient id is keyed in, and how the header compared."""

    namespace: str
    status: str

    @property
    def suspect(self) -> bool:
        return self.status in SUSPECT


@dataclass(frozen=True)
class IssuerPolicy:
    """Sites' namespaces and the alias table (normalised header value -> namespace)."""

    sites: Mapping[str, str]
    aliases: Mapping[str, str]
    default_namespace: str | None = None  # for sites not listed; None: an unlisted site is an error

    @classmethod
    def from_dict(cls, spec: Mapping | None, source: str = "platform/issuers.yaml") -> "IssuerPolicy":
        """From parsed YAML: `sites: {site: namespace}`, `aliases: {header value: namespace}`,
        optional `default_namespace`; a ConfigError names every mistake."""
        return cls.from_model(validate(IssuersFile, spec or {}, source))

    @classmethod
    def from_model(cls, spec) -> "IssuerPolicy":
        """From a validated `IssuersFile` (it has checked the alias table).
        Every namespace is also an alias of itself."""
        sites = {site: namespace.strip() for site, namespace in spec.sites.items()}
        default = spec.default_namespace.strip() if spec.default_namespace else None
        aliases = {normalise(value): namespace.strip() for value, namespace in spec.aliases.items()}
        for namespace in {*sites.values(), *([default] if default else [])}:
            aliases.setdefault(normalise(namespace), namespace)
        return cls(sites=sites, aliases=aliases, default_namespace=default)

    def namespace(self, site: str) -> str:
        """The namespace of a site's patient ids."""
        namespace = self.sites.get(site, self.default_namespace)
        if namespace is None:
            raise ValueError(f"issuers: site {site!r} has no namespace in platform/issuers.yaml")
        return namespace

    def resolve(self, site: str, header_value: str | None) -> IssuerResolution:
        """The namespace for a file of `site` whose IssuerOfPatientID is `header_value`."""
        namespace = self.namespace(site)
        key = normalise(header_value)
        if not key:
            return IssuerResolution(namespace, ABSENT)
        named = self.aliases.get(key)
        if named is None:
            return IssuerResolution(namespace, UNKNOWN)
        if named != namespace:
            return IssuerResolution(namespace, INCONSISTENT)
        return IssuerResolution(namespace, CONFIGURED if key == normalise(namespace) else ALIAS)


def count_statuses(resolutions: Iterable[IssuerResolution]) -> dict[str, int]:
    """{status: count} with every status present (zeros included), for a run's metadata."""
    counts = dict.fromkeys(STATUSES, 0)
    for resolution in resolutions:
        counts[resolution.status] += 1
    return counts
