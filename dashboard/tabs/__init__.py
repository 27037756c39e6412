"""The dashboard's tabs, one module each; every tab reads the session's state and report, none changes the engine."""
