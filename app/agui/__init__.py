"""The AG-UI endpoint: AG-UI clients (``@ag-ui/client``, CopilotKit) use the gateway as their
agent. ``input`` reads a ``RunAgentInput``, ``encoder`` turns the run's AgentEvents into AG-UI
events, ``tracker`` knows when the run waits on the client, ``stream`` serves one request's
event stream (http-api.md, "AG-UI endpoint")."""
