"""Pure views of API objects (pods, nodes, workloads, the weights cache); no kopf, no API client."""
