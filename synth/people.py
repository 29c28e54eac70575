"""The synthetic patients: names, NHS numbers, addresses, and who is seen at which site.

Names are unusual on purpose, so a leak is easy to grep for.
"""

from __future__ import annotations

import random
from datetime import date as Date, timedelta

from synth.spec import site_profile
from synth.truth import PatientTruth

SURNAMES = ["Ashdown", "Blackwood", "Carrow", "Dunmore", "Everleigh", "Fairbairn", "Greyling",
            "Hollinrake", "Inchbald", "Jessop", "Kettleborough", "Lumsden", "Marchbank",
            "Nettleship", "O'Callaghan", "Pennefather", "Quarrington", "Rutherglen", "Sowerby",
            "Threlfall", "Underhill", "Vavasour", "Wetherall", "Yardley"]
FORENAMES = {"F": ["Aurelia", "Cressida", "Eulalia", "Gwendolyn", "Imogen", "Leonora",
                   "Marguerite", "Philippa", "Rosalind", "Theodora", "Wilhelmina", "Henrietta"],
             "M": ["Bartholomew", "Desmond", "Fenwick", "Horatio", "Jasper", "Lancelot",
                   "Montague", "Percival", "Rupert", "Sebastian", "Tobias", "Ambrose"]}
STREETS = ["Larkspur Lane", "Mallow Close", "Quince Avenue", "Tansy Road", "Yarrow Crescent",
           "Foxglove Way", "Heather Mews", "Juniper Drive"]


def nhs_number(rng: random.Random, used: set[str]) -> str:
    """A 999-prefixed (test range) number with a valid NHS mod-11 check digit."""
    while True:
        digits = [9, 9, 9] + [rng.randrange(10) for _ in range(6)]
        check = (11 - sum(d * w for d, w in zip(digits, range(10, 1, -1))) % 11) % 11
        number = "".join(map(str, digits)) + str(check)
        if check != 10 and number not in used:
            used.add(number)
            return number


def make_person(rng: random.Random, used: set, site_index: int) -> PatientTruth:
    """A new patient living near site `site_index`; `used` holds the names and NHS numbers taken."""
    sex = rng.choice("FM")
    for attempt in range(100):  # unique full names keep greps and joins unambiguous
        family, given = rng.choice(SURNAMES), rng.choice(FORENAMES[sex])
        if attempt > 50:
            family = f"{family}-{rng.choice(SURNAMES)}"
        if (family, given) not in used:
            used.add((family, given))
            break
    _, _, town, area, _ = site_profile(site_index)
    postcode = f"{area}{rng.randrange(1, 20)} {rng.randrange(1, 10)}{rng.choice('ABDEHJLNPRSTUWXY')}{rng.choice('ABDEHJLNPRSTUWXY')}"
    born = Date(1936, 1, 1) + timedelta(days=rng.randrange(36 * 365))  # aged ~50-88 in 2024
    return PatientTruth(nhs_number(rng, used), "NHS", family, given, born.isoformat(), sex,
                        f"{rng.randrange(2, 180)} {rng.choice(STREETS)}", town, postcode)


def cast(rng, sites, n) -> tuple[list[list[PatientTruth]], list[list[PatientTruth]], list[PatientTruth]]:
    """Each site's imaged patients (slots), its never-imaged patients, and everyone once.
    From the second site on, slots 0 and 1 are the same people as slots n-2 and n-3 of
    the previous site."""
    used: set = set()
    slots: list[list[PatientTruth]] = []
    others: list[list[PatientTruth]] = []
    everyone: list[PatientTruth] = []
    for si, site in enumerate(sites):
        slots.append([slots[si - 1][n - 2 - k] if (si > 0 and n >= 3 and k < 2) else make_person(rng, used, si)
                      for k in range(n)])
        others.append([make_person(rng, used, si) for _ in range(max(1, n // 3))])
        for person in slots[si] + others[si]:
            if not any(p is person for p in everyone):
                everyone.append(person)
            person.sites.append(site)
            person.hospital_numbers[site] = f"{site_profile(si)[1]}{rng.randrange(10**6, 10**7)}"
    return slots, others, everyone
