"""Guardrails' machinery (DESIGN 13): patterns and the output gate that holds back what no
check has passed yet. The public names will be ``agent_sync.guardrails``'s."""
