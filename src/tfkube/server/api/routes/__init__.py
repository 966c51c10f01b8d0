"""One module per API resource; each is a thin layer: parse, check scope, read through
`tfkube.server.queries` or call the domain, return a wire model."""
