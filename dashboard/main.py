"""What `panel serve dashboard` runs: assembles the app from dashboard.app."""

from dashboard.app import build_app

build_app().servable(title="DNN accelerator memory explorer")
