"""`params.yaml` -> typed, validated, frozen config objects.

loader.py reads params.yaml and builds `Config`, the root that names every section; the sections are dataclasses in
modules grouped by what they configure: data.py (datasets, worlds, vocabularies), features.py (the extractors),
training.py (training recipes, systems, ensembles, a paper's section), compute.py (compute, runtime, evaluation) and
reports.py (HOCA's studies). Import each name from the module that defines it. This file exposes nothing: Python
runs it whenever one of those modules is imported, so the loader here would come with every section a module needs.
"""
