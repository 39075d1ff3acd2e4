"""The AI SDK's real chat client (the ``ai`` npm package), driven from the tests by node."""
