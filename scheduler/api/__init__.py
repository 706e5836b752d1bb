"""The jobs API: viewsets and serializers."""
