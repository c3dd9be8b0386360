"""The study kit: what every study shares.

One training loop (:mod:`~experiments.kit.loop`), one ``norm`` config consumed one way
(:mod:`~experiments.kit.norm`), typed config schemas and the study runner
(:mod:`~experiments.kit.config`), data (:mod:`~experiments.kit.data`), samplers, run logs,
the classification skeleton of the image studies (:mod:`~experiments.kit.classify`), a run's
identity (:mod:`~experiments.kit.identity`: what a resume may change, what makes seeds one
setting), the results pipeline (:mod:`~experiments.kit.results`) and the errors every command
line reports in one line (:mod:`~experiments.kit.errors`). A study adds a module, a config and
its registry record (:mod:`experiments.studies`).
"""
