"""ApiVersions (18), v0-4: the versions come from the handler registry, the features from the
cluster's finalized levels (see :mod:`odradek.broker.advertised`).

An unsupported ApiVersions version is answered by the connection layer with a v0 body, error 35
and the full list, so that any client can negotiate.
"""

from __future__ import annotations

from odradek.broker.advertised import api_versions_response
from odradek.broker.dispatch import RequestContext, handles
from odradek.protocol import ApiKey
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse


@handles(ApiKey.API_VERSIONS, versions=(0, 4))
async def api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.version >= 3:
        ctx.session.client_software = (
            (request.client_software_name or "")[:256], (request.client_software_version or "")[:256]
        )
    return api_versions_response(0, ctx.ports.features, ctx.listener, ctx.version)
