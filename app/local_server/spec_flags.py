"""llama-server's speculation flags, by the ``launch`` key that sets each one.

When ``launch.draft_model`` is set the managed server gets these flags from the
``launch.spec_*`` keys; a second copy in ``launch.args`` would fight them, so the
config refuses it and names the key to use. Draft tuning flags with no key here
(``-ngld``, ``-td``, ``--spec-draft-device``, ...) stay allowed in ``args``.
"""

SPEC_FLAG_KEYS: dict[str, str] = {
    "-md": "draft_model",
    "--model-draft": "draft_model",
    "--spec-draft-model": "draft_model",
    "--spec-type": "spec_type",
    "--spec-draft-n-max": "spec_n_max",
    "--draft": "spec_n_max",
    "--draft-n": "spec_n_max",
    "--draft-max": "spec_n_max",
    "--spec-draft-n-min": "spec_n_min",
    "--draft-min": "spec_n_min",
    "--draft-n-min": "spec_n_min",
    "--spec-draft-p-min": "spec_p_min",
    "--draft-p-min": "spec_p_min",
}
