"""The GraphQL mutations a reviewer's login must be refused (tests/test_ui_proxy.py, tests/test_ui_browser.py): one of
each kind the UI offers, as the UI sends it. Not a test module."""

LOCATION, REPOSITORY = "imaging_platform", "__repository__"
ERRORS = "... on UnauthorizedError { message } ... on PythonError { message } ... on Error { message }"
SENSOR = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": "landing_sensor"}


def mutations(cohort: str, site_day: str, run_id: str | None = None) -> dict[str, tuple[str, dict]]:
    """What a person can ask for, by what it is: (document, variables); each answers one error or a result. The
    run's (terminate, delete) need a run that exists: Dagster looks the run up before it checks the permission.
    (`setAutoMaterializePaused` is left out: Dagster 1.13 answers its refusal as a type error, not a message.)"""
    found = {
        "materialize (launch a run)": ("""mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
            __typename """ + ERRORS + " } }", {"p": {
                "selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": "publish"},
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": cohort}]}}}),
        "backfill": ("""mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
            __typename """ + ERRORS + " } }", {"p": {"assetSelection": [{"path": ["published_cohort"]}],
                                                    "partitionNames": [cohort]}}),
        "turn a sensor on": ("""mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
            """ + ERRORS + " } }", {"s": SENSOR}),
        "move a sensor's cursor": ("""mutation($s: SensorSelector!) { setSensorCursor(sensorSelector: $s,
            cursor: "0") { __typename """ + ERRORS + " } }", {"s": SENSOR}),
        "preview a sensor": ("""mutation($s: SensorSelector!) { sensorDryRun(selectorData: $s, cursor: "") {
            __typename """ + ERRORS + " } }", {"s": SENSOR}),
        "turn a schedule on": ("""mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
            __typename """ + ERRORS + " } }", {"s": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY,
                                                      "scheduleName": "none"}}),
        "wipe an asset": ("""mutation($r: [PartitionsByAssetSelector!]!) { wipeAssets(assetPartitionRanges: $r) {
            __typename """ + ERRORS + " } }", {"r": [{"assetKey": {"path": ["raw_image_index"]}}]}),
        "report an event": ("""mutation($p: ReportRunlessAssetEventsParams!) { reportRunlessAssetEvents(
            eventParams: $p) { __typename """ + ERRORS + " } }", {"p": {
                "eventType": "ASSET_MATERIALIZATION", "assetKey": {"path": ["raw_image_index"]},
                "partitionKeys": [site_day]}}),
        "reload the code": ("mutation { reloadWorkspace { __typename " + ERRORS + " } }", {}),
    }
    if run_id:
        found["terminate a run"] = ("""mutation($id: String!) { terminateRun(runId: $id) { __typename
            ... on TerminateRunFailure { message } """ + ERRORS + " } }", {"id": run_id})
        found["delete a run"] = ("""mutation($id: String!) { deleteRun(runId: $id) { __typename """ + ERRORS + " } }",
                                 {"id": run_id})
    return found


def answer(data: dict) -> dict:
    """A mutation's one result: its `__typename` and `message`."""
    (result,) = data.values()
    return result


REFUSED = "Refused: this login may only read (a reviewer)"


def refused(result: dict) -> bool:
    """A refusal a person understands: the proxy's words for Dagster's UnauthorizedError, or Dagster's own for a run
    it will not terminate ("You do not have permission to terminate this run")."""
    return (result.get("__typename") == "UnauthorizedError" and result["message"].startswith(REFUSED)) or (
        result.get("__typename") == "TerminateRunFailure" and "do not have permission" in result["message"])
