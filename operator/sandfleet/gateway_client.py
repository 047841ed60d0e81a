"""GatewayClient: the async gRPC client of the gateway's GatewayService (claim, release)."""
