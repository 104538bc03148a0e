"""python -m pipeline.core.settings > workflow/schemas/config.schema.json: the config's JSON schema."""

import json
import sys

from pipeline.core.settings.root import config_schema

json.dump(config_schema(), sys.stdout, indent=1)
sys.stdout.write("\n")
