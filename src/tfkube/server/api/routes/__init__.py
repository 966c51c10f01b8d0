"""One module per API resource; each is a thin layer: parse, check scope, call the domain,
return a wire model."""
