"""The main job: its stages, their typed results, and the pipeline that runs them."""
