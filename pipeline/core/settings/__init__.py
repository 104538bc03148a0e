"""One contract per config section: the only declaration of every setting's name, type, range,
default and help.

Each section of config.yaml is a pydantic model here (``extra="forbid"``, strict types, finite
numbers). Everything else is derived from these models:

- validation and defaults: ``pipeline.core.config.validate_config`` fills the defaults a config leaves
  out and validates the whole config against ``Config``; errors name the key path;
- the JSON schema (``config_schema()``; committed as workflow/schemas/config.schema.json for editors,
  tests/test_settings.py keeps it current);
- the CLI flags of a stage (``add_flags``) and a hand run's command line built from settings (``to_flags``:
  no rule's, each passes a settings document; bench/ccr_regime.py's).

A default is declared here and nowhere else: it is the demo's value (small step counts that run on 2
CPU cores); recipes and overlays change it for paper-scale runs. config.yaml restates none, and
docs/config.md, the reference users read, is generated from these models
(pipeline.core.settings_reference); tests/test_settings.py checks both.

Where they live: each family's section contracts beside its stages, in pipeline/<family>/settings.py
(data: datasets and recipes; retrieval; evaluation; training; sieve: the sieve and its filters; ar2);
here, what they share and what composes them: base (Contract, the bounds, ConfigError), flags,
validation, root (Config: every section) and job_documents (each stage's settings document). These
modules are the bottom layer of the package (tests/test_layout.py): they import only each other, and
every module may import them, so a reader below a family (core's method table, evaluation's
tournament) reads that family's contracts without importing its stages. Import a contract from its
module (``from pipeline.sieve.settings import SieveSettings``): nothing is re-exported, so each name
has one address.
"""
