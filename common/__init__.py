"""Libraries every app may use, with no models and no app of their own: the outbound-destination policy,
the one cipher, strict request parameters, bulk staging, the client address and shared types."""
