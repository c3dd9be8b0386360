"""``results/README.md``: what each committed result holds, where it comes from, and its numbers,
every table read from the committed ``summary.json`` and CSV files.

    python -m scripts.results_readme           # write it (make results-readme), offline
    python -m scripts.results_readme --check   # exit 1 naming the first line that differs

The document follows the study registry (``experiments.studies``): a part per study, a section per
registered ``Section`` (its anchor, title, results path, reproduction target and figures), its
setups named by the study's ``labels``; a new study's sections appear by registration alone, and a
section whose results are not committed says so in one line. The prose lives in two templates
here: ``readme.md.j2``, the frame, and ``sections.md.j2``, a macro per section anchor (and per
study) that says what the section's tables show; a number in either comes from the data.
"""
