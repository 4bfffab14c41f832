"""Error codes of the graphs app (stable API)."""

INVALID_CONTEXT_TOPOLOGY = "invalid_context_topology"
UNSUPPORTED_CONNECTION = "unsupported_connection"
VALIDATION_FAILED = "validation_failed"
REVISION_CONFLICT = "revision_conflict"
GRAPH_TOO_LARGE = "graph_too_large"
PARAMETERS_TOO_LARGE = "parameters_too_large"
INVALID_GRAPH = "invalid_graph"
NOT_A_TEAM_LEAD = "not_a_team_lead"
INVALID_SUBAGENT_TYPE = "invalid_subagent_type"
NOT_DEPLOYED = "not_deployed"
TRANSFER_NOT_CONFIRMED = "transfer_not_confirmed"

# What a graph that is normalized on the way in can be refused with (400), for the API schema.
GRAPH_INPUT_CODES = (INVALID_GRAPH, GRAPH_TOO_LARGE, PARAMETERS_TOO_LARGE)
GRAPH_TOPOLOGY_CODES = (INVALID_CONTEXT_TOPOLOGY, UNSUPPORTED_CONNECTION)
