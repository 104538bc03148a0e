"""One contract per config section: the only declaration of every setting's name, type, range,
default and help, one module per family.

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

The modules: base (Contract, the bounds, ConfigError), flags, validation, data (datasets and recipes),
retrieval, evaluation, training, sieve, ar2, root (Config and its sections) and job_documents (each
stage's settings document). Each family's contracts live here under core, not in the family's own
package, because imports go down the family order (core, data, synthkb, retrieval, evaluation,
training, sieve, ar2, workflow) while readers below a family need its contracts: core's method table
(pipeline.core.methods) reads the sieve's filter registry, core's config check validates every
section, and evaluation reads a whole config (the tournament, the method notes), training's and the
sieve's sections included. Import a contract from its module
(``from pipeline.core.settings.sieve import SieveSettings``): the package re-exports nothing, so each
name has one address.
"""
