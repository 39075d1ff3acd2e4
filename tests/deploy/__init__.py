"""The deployment examples (examples/deployments/) served as users deploy them."""
