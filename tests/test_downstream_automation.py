"""Declarative automation downstream (assets/automation.py), evaluated against a real ephemeral instance."""

from dagster import AssetKey, AssetMaterialization, DagsterInstance, DefaultSensorStatus, evaluate_automation_conditions


def _defs():
    from definitions import defs

    return defs


def _requested(result) -> dict[str, list[str]]:
    return {r.key.to_user_string(): sorted(result.get_requested_partitions(r.key))
            for r in result.results if result.get_num_requested(r.key)}


def test_catch_up_follows_exactly_the_updated_site_days():
    from automation.downstream import downstream_automation

    assert downstream_automation.default_status == DefaultSensorStatus.STOPPED
    defs, instance = _defs(), DagsterInstance.ephemeral()
    # Hundreds of never-run partitions: none is requested just for being missing.
    result = evaluate_automation_conditions(defs=defs, instance=instance)
    assert result.total_requested == 0
    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert result.total_requested == 0, "nothing happened, nothing requested"
    # An operator re-runs raw_image_index alone for one site-day: both downstream assets of that
    # site-day are requested together (one run), and no other partition.
    instance.report_runless_asset_event(AssetMaterialization("raw_image_index", partition="2024-03-02|site-b"))
    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert _requested(result) == {"linked_patient_metadata": ["2024-03-02|site-b"],
                                  "anonymized_images": ["2024-03-02|site-b"]}
    # A site-day the landing sensor ran end to end needs nothing more; neither does the cohort.
    for asset in ("raw_image_index", "linked_patient_metadata", "anonymized_images"):
        instance.report_runless_asset_event(AssetMaterialization(asset, partition="2024-03-03|site-a"))
    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert "2024-03-03|site-a" not in sum(_requested(result).values(), [])
    assert AssetKey("published_cohort") not in {r.key for r in result.results if result.get_num_requested(r.key)}
