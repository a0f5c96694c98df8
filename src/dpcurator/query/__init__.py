"""The query layer: public metadata, query IR, SQL front end, planner, sessions and engines."""
