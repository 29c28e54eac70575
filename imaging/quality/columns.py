"""Clinical columns the quality checks read, derived from the clinical policy (birth dates, identity
columns) and their date formats as Spark patterns. Pure: no Spark, no Dagster."""

from __future__ import annotations


# Birth dates: the platform's index holds no PatientBirthDate (it is not read from headers), so the
# clinical extract is the source, through the policy's `age_at_scan` columns and date formats.

_STRPTIME_TO_JAVA = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%y": "yy", "%b": "MMM", "%B": "MMMM"}


def java_date_pattern(strptime_format: str) -> str:
    """A `datetime.strptime` date format as a Java (Spark) pattern, e.g. '%d/%m/%Y' -> 'dd/MM/yyyy'."""
    out, i = [], 0
    while i < len(strptime_format):
        token = strptime_format[i:i + 2]
        if token in _STRPTIME_TO_JAVA:
            out.append(_STRPTIME_TO_JAVA[token])
            i += 2
        elif token.startswith("%"):
            raise ValueError(f"date format directive {token!r} has no Spark equivalent here")
        else:
            char = strptime_format[i]
            out.append(f"'{char}'" if char.isalpha() else char)
            i += 1
    return "".join(out)


def birth_date_columns(policy) -> tuple[str, ...]:
    """Clinical columns holding the birth date: the aliases of the policy's `age_at_scan` rule."""
    return tuple(alias for rule in policy.rules if rule.action == "age_at_scan" for alias in rule.aliases)


def identity_columns(policy) -> tuple[str, ...]:
    """Clinical columns that tell people apart (identifiers and birth date), `patient_id` excluded."""
    return tuple(sorted((set(policy.identifiers) | set(birth_date_columns(policy))) - {"patient_id"}))
