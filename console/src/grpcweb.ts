// gRPC-Web unary calls over fetch: the console's only way to the authority. Each call is a POST
// of one length-prefixed message to /<package>.<Service>/<Method> on the page's own origin,
// with the operator token as `authorization: Bearer <token>`; the answer is a data frame and a
// trailer frame (or, for an error without a message, the status in the headers).

import { BinaryReader } from "@bufbuild/protobuf/wire";
import { BadRequest, ErrorInfo } from "./gen/google/rpc/error_details.js";
import { Status } from "./gen/google/rpc/status.js";

/** What generated message objects offer: enough to send and read one. */
export interface Codec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: BinaryReader | Uint8Array): T;
}

/** gRPC status codes the console tells apart. */
export const Code = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  FAILED_PRECONDITION: 9,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** A call that did not succeed: its gRPC code, message, ErrorInfo reason (if any) and the
 * fields it names as bad (BadRequest's violations: field path → rule). */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly reason = "",
    readonly fields: ReadonlyMap<string, string> = new Map(),
  ) {
    super(message);
  }
}

/** Call `path` with `request`; resolves to the decoded answer or rejects with an RpcError. */
export async function unary<Req, Res>(
  path: string,
  request: Req,
  req: Codec<Req>,
  res: Codec<Res>,
  token: string,
): Promise<Res> {
  const message = req.encode(request).finish();
  const body = new Uint8Array(5 + message.length);
  new DataView(body.buffer).setUint32(1, message.length);
  body.set(message, 5);
  const headers: Record<string, string> = {
    "content-type": "application/grpc-web+proto",
    "x-grpc-web": "1",
  };
  if (token !== "") headers.authorization = `Bearer ${token}`;
  let response: Response;
  try {
    response = await fetch(path, { method: "POST", headers, body, credentials: "omit" });
  } catch (e) {
    throw new RpcError(Code.UNAVAILABLE, `the authority cannot be reached (${String(e)})`);
  }
  if (!response.ok) {
    throw new RpcError(Code.UNAVAILABLE, `HTTP ${response.status} from the admin endpoint`);
  }
  const bytes = new Uint8Array(await response.arrayBuffer());
  let data: Uint8Array | undefined;
  const trailers = new Map<string, string>();
  response.headers.forEach((value, key) => trailers.set(key, value));
  for (let at = 0; at + 5 <= bytes.length; ) {
    const flag = bytes[at];
    const length = new DataView(bytes.buffer, bytes.byteOffset + at + 1, 4).getUint32(0);
    const frame = bytes.subarray(at + 5, at + 5 + length);
    at += 5 + length;
    if ((flag & 0x80) === 0) {
      data = frame;
      continue;
    }
    for (const line of new TextDecoder().decode(frame).split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0) trailers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
  }
  const code = Number(trailers.get("grpc-status") ?? "0");
  if (code !== Code.OK) {
    const { reason, fields } = detailsOf(trailers);
    throw new RpcError(code, decodeURIComponent(trailers.get("grpc-message") ?? ""), reason, fields);
  }
  if (data === undefined) throw new RpcError(Code.UNAVAILABLE, "the answer carried no message");
  return res.decode(data);
}

/** The ErrorInfo reason and the BadRequest violations in `grpc-status-details-bin`. */
function detailsOf(trailers: Map<string, string>): { reason: string; fields: Map<string, string> } {
  const out = { reason: "", fields: new Map<string, string>() };
  const details = trailers.get("grpc-status-details-bin");
  if (details === undefined) return out;
  try {
    const raw = Uint8Array.from(atob(details.padEnd(Math.ceil(details.length / 4) * 4, "=")), (c) =>
      c.charCodeAt(0),
    );
    for (const any of Status.decode(raw).details) {
      if (any.typeUrl.endsWith("google.rpc.ErrorInfo")) out.reason = ErrorInfo.decode(any.value).reason;
      if (any.typeUrl.endsWith("google.rpc.BadRequest")) {
        for (const v of BadRequest.decode(any.value).fieldViolations) out.fields.set(v.field, v.description);
      }
    }
  } catch {
    // A detail the console cannot read: the code and message still say what happened.
  }
  return out;
}
