"""The papers' claims, checked against the committed results: ``results/CLAIMS.md``.

    python -m scripts.claims            # writes results/CLAIMS.md (offline, from results/*)
    python -m scripts.claims --check    # exits 1 if results/CLAIMS.md is not what the results give

One module per source (``bn_paper``, ``brn_paper``, ``mechanism``, ``questions``), each a list of
:class:`~scripts.claims.claim.Claim` entries: what the paper says, how we measure it and the
rule that decides it. The statistics and windows are the analysis plan of ``scripts.analysis``.
"""
