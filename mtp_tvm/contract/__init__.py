"""The contract as code (docs/spec.md): the presets and their sizes, the stages and cases with their tensors and
checks, and the torch goldens, step for step as the spec. No TVM here."""
