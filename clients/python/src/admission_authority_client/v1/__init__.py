"""Generated from proto/admission/v1/admission.proto by scripts/gen-clients."""
