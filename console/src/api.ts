// The RPCs the console calls: the same Admission and Operator methods grpcurl and the clients
// use, each with the operator token. One line per method keeps the list easy to check against
// the proto.

import * as pb from "./gen/admission/v1/admission.js";
import { type Codec, unary } from "./grpcweb.js";

function rpc<Req, Res>(service: string, method: string, req: Codec<Req>, res: Codec<Res>) {
  return (token: string, request: Req): Promise<Res> =>
    unary(`/admission.v1.${service}/${method}`, request, req, res, token);
}

export const api = {
  listHosts: rpc("Operator", "ListHosts", pb.ListHostsRequest, pb.ListHostsResponse),
  getStats: rpc("Admission", "GetStats", pb.GetStatsRequest, pb.Stats),
  listTickets: rpc("Operator", "ListTickets", pb.ListTicketsRequest, pb.ListTicketsResponse),
  release: rpc("Admission", "Release", pb.ReleaseRequest, pb.ReleaseResponse),
  listReservations: rpc("Operator", "ListReservations", pb.ListReservationsRequest, pb.ListReservationsResponse),
  resolveReservation: rpc("Operator", "ResolveReservation", pb.ResolveReservationRequest, pb.ResolveReservationResponse),
  unlockAuth: rpc("Operator", "UnlockAuth", pb.UnlockAuthRequest, pb.UnlockAuthResponse),
  getLimits: rpc("Operator", "GetLimits", pb.GetLimitsRequest, pb.GetLimitsResponse),
  setLimits: rpc("Operator", "SetLimits", pb.SetLimitsRequest, pb.SetLimitsResponse),
  resetLimits: rpc("Operator", "ResetLimits", pb.ResetLimitsRequest, pb.ResetLimitsResponse),
  drain: rpc("Operator", "Drain", pb.DrainRequest, pb.DrainResponse),
  getRateLimits: rpc("Operator", "GetRateLimits", pb.GetRateLimitsRequest, pb.GetRateLimitsResponse),
  listHttpPolicies: rpc("Operator", "ListHttpPolicies", pb.ListHttpPoliciesRequest, pb.ListHttpPoliciesResponse),
  listEndedTickets: rpc("Operator", "ListEndedTickets", pb.ListEndedTicketsRequest, pb.ListEndedTicketsResponse),
  getHostHistory: rpc("Operator", "GetHostHistory", pb.GetHostHistoryRequest, pb.GetHostHistoryResponse),
};

export { pb };
