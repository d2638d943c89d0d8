"use strict";
(() => {
  var __defProp = Object.defineProperty;
  var __export = (target, all) => {
    for (var name in all)
      __defProp(target, name, { get: all[name], enumerable: true });
  };

  // src/gen/admission/v1/admission.ts
  var admission_exports = {};
  __export(admission_exports, {
    AccountStats: () => AccountStats,
    AdaptiveLimits: () => AdaptiveLimits,
    AuthAttemptRequest: () => AuthAttemptRequest,
    AuthAttemptResponse: () => AuthAttemptResponse,
    AuthBucket: () => AuthBucket,
    AuthResetRequest: () => AuthResetRequest,
    AuthResetResponse: () => AuthResetResponse,
    AuthorizeRequest: () => AuthorizeRequest,
    AuthorizeResponse: () => AuthorizeResponse,
    Blocker: () => Blocker,
    Coverage: () => Coverage,
    Decision: () => Decision,
    DrainRequest: () => DrainRequest,
    DrainResponse: () => DrainResponse,
    GetLimitsRequest: () => GetLimitsRequest,
    GetLimitsResponse: () => GetLimitsResponse,
    GetLimitsResponse_AdaptiveCapsEntry: () => GetLimitsResponse_AdaptiveCapsEntry,
    GetRateLimitsRequest: () => GetRateLimitsRequest,
    GetRateLimitsResponse: () => GetRateLimitsResponse,
    GetStatsRequest: () => GetStatsRequest,
    HostLimits: () => HostLimits,
    HostLimits_AccountsEntry: () => HostLimits_AccountsEntry,
    HostLimits_AdaptiveAccountsEntry: () => HostLimits_AdaptiveAccountsEntry,
    HostLimits_SubjectsEntry: () => HostLimits_SubjectsEntry,
    HostLimits_WeightsEntry: () => HostLimits_WeightsEntry,
    HttpPolicyInfo: () => HttpPolicyInfo,
    KeyPolicy: () => KeyPolicy,
    LimitsSource: () => LimitsSource,
    ListHostsRequest: () => ListHostsRequest,
    ListHostsResponse: () => ListHostsResponse,
    ListHttpPoliciesRequest: () => ListHttpPoliciesRequest,
    ListHttpPoliciesResponse: () => ListHttpPoliciesResponse,
    ListReservationsRequest: () => ListReservationsRequest,
    ListReservationsResponse: () => ListReservationsResponse,
    ListTicketsRequest: () => ListTicketsRequest,
    ListTicketsResponse: () => ListTicketsResponse,
    Outcome: () => Outcome,
    ParkRequest: () => ParkRequest,
    ParkResponse: () => ParkResponse,
    QueueLimits: () => QueueLimits,
    RateLimitCounter: () => RateLimitCounter,
    RateLimitDomain: () => RateLimitDomain,
    RateLimitRule: () => RateLimitRule,
    ReclaimRequest: () => ReclaimRequest,
    ReclaimResponse: () => ReclaimResponse,
    ReleaseRequest: () => ReleaseRequest,
    ReleaseResponse: () => ReleaseResponse,
    RenewRequest: () => RenewRequest,
    RenewResponse: () => RenewResponse,
    RenewedTicket: () => RenewedTicket,
    ReservationInfo: () => ReservationInfo,
    ReservationState: () => ReservationState,
    ResetLimitsRequest: () => ResetLimitsRequest,
    ResetLimitsResponse: () => ResetLimitsResponse,
    Resolution: () => Resolution,
    ResolveReservationRequest: () => ResolveReservationRequest,
    ResolveReservationResponse: () => ResolveReservationResponse,
    SetLimitsRequest: () => SetLimitsRequest,
    SetLimitsResponse: () => SetLimitsResponse,
    SettleRequest: () => SettleRequest,
    SettleResponse: () => SettleResponse,
    Stats: () => Stats,
    SubjectStats: () => SubjectStats,
    SubmitMode: () => SubmitMode,
    SubmitRequest: () => SubmitRequest,
    SubmitResponse: () => SubmitResponse,
    TicketInfo: () => TicketInfo,
    TicketState: () => TicketState,
    UnlockAuthRequest: () => UnlockAuthRequest,
    UnlockAuthResponse: () => UnlockAuthResponse,
    UnparkRequest: () => UnparkRequest,
    UnparkResponse: () => UnparkResponse,
    Usage: () => Usage,
    WaitEvent: () => WaitEvent,
    WaitRequest: () => WaitRequest,
    protobufFileName: () => protobufFileName,
    protobufPackage: () => protobufPackage
  });

  // node_modules/@bufbuild/protobuf/dist/esm/wire/varint.js
  function varint64read() {
    const buf = this.buf;
    let pos = this.pos;
    let lo = 0;
    let hi = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      const b = buf[pos++];
      lo |= (b & 127) << shift;
      if ((b & 128) == 0) {
        this.pos = pos;
        this.assertBounds();
        this.varint64Lo = lo;
        this.varint64Hi = hi;
        return;
      }
    }
    const middleByte = buf[pos++];
    lo |= (middleByte & 15) << 28;
    hi = (middleByte & 112) >> 4;
    if ((middleByte & 128) == 0) {
      this.pos = pos;
      this.assertBounds();
      this.varint64Lo = lo;
      this.varint64Hi = hi;
      return;
    }
    for (let shift = 3; shift <= 31; shift += 7) {
      const b = buf[pos++];
      hi |= (b & 127) << shift;
      if ((b & 128) == 0) {
        this.pos = pos;
        this.assertBounds();
        this.varint64Lo = lo;
        this.varint64Hi = hi;
        return;
      }
    }
    throw new Error("invalid varint");
  }
  var TWO_PWR_32_DBL = 4294967296;
  function int64FromString(dec) {
    const minus = dec[0] === "-";
    if (minus) {
      dec = dec.slice(1);
    }
    const base = 1e6;
    let lowBits = 0;
    let highBits = 0;
    function add1e6digit(begin, end) {
      const digit1e6 = Number(dec.slice(begin, end));
      highBits *= base;
      lowBits = lowBits * base + digit1e6;
      if (lowBits >= TWO_PWR_32_DBL) {
        highBits = highBits + (lowBits / TWO_PWR_32_DBL | 0);
        lowBits = lowBits % TWO_PWR_32_DBL;
      }
    }
    add1e6digit(-24, -18);
    add1e6digit(-18, -12);
    add1e6digit(-12, -6);
    add1e6digit(-6);
    return minus ? negate(lowBits, highBits) : newBits(lowBits, highBits);
  }
  function int64ToString(lo, hi) {
    let bits = newBits(lo, hi);
    const negative = bits.hi & 2147483648;
    if (negative) {
      bits = negate(bits.lo, bits.hi);
    }
    const result = uInt64ToString(bits.lo, bits.hi);
    return negative ? "-" + result : result;
  }
  function uInt64ToString(lo, hi) {
    ({ lo, hi } = toUnsigned(lo, hi));
    if (hi <= 2097151) {
      return String(TWO_PWR_32_DBL * hi + lo);
    }
    const low = lo & 16777215;
    const mid = (lo >>> 24 | hi << 8) & 16777215;
    const high = hi >> 16 & 65535;
    let digitA = low + mid * 6777216 + high * 6710656;
    let digitB = mid + high * 8147497;
    let digitC = high * 2;
    const base = 1e7;
    if (digitA >= base) {
      digitB += Math.floor(digitA / base);
      digitA %= base;
    }
    if (digitB >= base) {
      digitC += Math.floor(digitB / base);
      digitB %= base;
    }
    return digitC.toString() + decimalFrom1e7WithLeadingZeros(digitB) + decimalFrom1e7WithLeadingZeros(digitA);
  }
  function toUnsigned(lo, hi) {
    return { lo: lo >>> 0, hi: hi >>> 0 };
  }
  function newBits(lo, hi) {
    return { lo: lo | 0, hi: hi | 0 };
  }
  function negate(lowBits, highBits) {
    highBits = ~highBits;
    if (lowBits) {
      lowBits = ~lowBits + 1;
    } else {
      highBits += 1;
    }
    return newBits(lowBits, highBits);
  }
  var decimalFrom1e7WithLeadingZeros = (digit1e7) => {
    const partial = String(digit1e7);
    return "0000000".slice(partial.length) + partial;
  };
  function varint32read() {
    let b = this.buf[this.pos++];
    if ((b & 128) === 0) {
      this.assertBounds();
      return b;
    }
    let result = b & 127;
    b = this.buf[this.pos++];
    result |= (b & 127) << 7;
    if ((b & 128) === 0) {
      this.assertBounds();
      return result;
    }
    b = this.buf[this.pos++];
    result |= (b & 127) << 14;
    if ((b & 128) === 0) {
      this.assertBounds();
      return result;
    }
    b = this.buf[this.pos++];
    result |= (b & 127) << 21;
    if ((b & 128) === 0) {
      this.assertBounds();
      return result;
    }
    b = this.buf[this.pos++];
    result |= (b & 15) << 28;
    for (let readBytes = 5; (b & 128) !== 0 && readBytes < 10; readBytes++)
      b = this.buf[this.pos++];
    if ((b & 128) !== 0)
      throw new Error("invalid varint");
    this.assertBounds();
    return result >>> 0;
  }

  // node_modules/@bufbuild/protobuf/dist/esm/proto-int64.js
  var protoInt64 = /* @__PURE__ */ makeInt64Support();
  function makeInt64Support() {
    const dv = new DataView(new ArrayBuffer(8));
    const ok = typeof BigInt === "function" && typeof dv.getBigInt64 === "function" && typeof dv.getBigUint64 === "function" && typeof dv.setBigInt64 === "function" && typeof dv.setBigUint64 === "function" && (!!globalThis.Deno || !!globalThis.Bun || typeof process != "object" || typeof process.env != "object" || process.env.BUF_BIGINT_DISABLE !== "1");
    if (ok) {
      const MIN = BigInt("-9223372036854775808");
      const MAX = BigInt("9223372036854775807");
      const UMIN = BigInt("0");
      const UMAX = BigInt("18446744073709551615");
      return {
        zero: BigInt(0),
        supported: true,
        parse(value) {
          const bi = typeof value == "bigint" ? value : BigInt(value);
          if (bi > MAX || bi < MIN) {
            throw new Error(`invalid int64: ${value}`);
          }
          return bi;
        },
        uParse(value) {
          const bi = typeof value == "bigint" ? value : BigInt(value);
          if (bi > UMAX || bi < UMIN) {
            throw new Error(`invalid uint64: ${value}`);
          }
          return bi;
        },
        enc(value) {
          dv.setBigInt64(0, this.parse(value), true);
          return {
            lo: dv.getInt32(0, true),
            hi: dv.getInt32(4, true)
          };
        },
        uEnc(value) {
          dv.setBigInt64(0, this.uParse(value), true);
          return {
            lo: dv.getInt32(0, true),
            hi: dv.getInt32(4, true)
          };
        },
        dec(lo, hi) {
          dv.setInt32(0, lo, true);
          dv.setInt32(4, hi, true);
          return dv.getBigInt64(0, true);
        },
        uDec(lo, hi) {
          dv.setInt32(0, lo, true);
          dv.setInt32(4, hi, true);
          return dv.getBigUint64(0, true);
        }
      };
    }
    return {
      zero: "0",
      supported: false,
      parse(value) {
        if (typeof value != "string") {
          value = value.toString();
        }
        assertInt64String(value);
        return value;
      },
      uParse(value) {
        if (typeof value != "string") {
          value = value.toString();
        }
        assertUInt64String(value);
        return value;
      },
      enc(value) {
        if (typeof value != "string") {
          value = value.toString();
        }
        assertInt64String(value);
        return int64FromString(value);
      },
      uEnc(value) {
        if (typeof value != "string") {
          value = value.toString();
        }
        assertUInt64String(value);
        return int64FromString(value);
      },
      dec(lo, hi) {
        return int64ToString(lo, hi);
      },
      uDec(lo, hi) {
        return uInt64ToString(lo, hi);
      }
    };
  }
  function assertInt64String(value) {
    if (!/^-?[0-9]+$/.test(value)) {
      throw new Error("invalid int64: " + value);
    }
  }
  function assertUInt64String(value) {
    if (!/^[0-9]+$/.test(value)) {
      throw new Error("invalid uint64: " + value);
    }
  }

  // node_modules/@bufbuild/protobuf/dist/esm/wire/text-encoding.js
  var te;
  function configureTextEncoding(textEncoding) {
    var _a;
    te = Object.assign(Object.assign({}, textEncoding), { encodeUtf8Into: (_a = textEncoding.encodeUtf8Into) !== null && _a !== void 0 ? _a : emulateEncodeInto(textEncoding.encodeUtf8.bind(textEncoding)) });
  }
  function getTextEncoding() {
    if (!te) {
      const globals = globalThis;
      if (!globals.TextEncoder || !globals.TextDecoder) {
        throw new Error("encoding API missing: install TextEncoder and TextDecoder on globalThis");
      }
      const textEncoder = new globals.TextEncoder();
      const textDecoder = new globals.TextDecoder("utf-8", {
        ignoreBOM: true
      });
      let textDecoderStrict;
      const config = {
        encodeUtf8(text) {
          return textEncoder.encode(text);
        },
        decodeUtf8(bytes, strict) {
          if (strict) {
            if (!textDecoderStrict) {
              textDecoderStrict = new globals.TextDecoder("utf-8", {
                fatal: true,
                ignoreBOM: true
              });
            }
            return textDecoderStrict.decode(bytes);
          }
          return textDecoder.decode(bytes);
        },
        checkUtf8(text) {
          try {
            encodeURIComponent(text);
            return true;
          } catch (_) {
            return false;
          }
        }
      };
      if (textEncoder.encodeInto) {
        config.encodeUtf8Into = textEncoder.encodeInto.bind(textEncoder);
      }
      const nativeStringIsWellFormed = String.prototype.isWellFormed;
      if (nativeStringIsWellFormed) {
        config.checkUtf8 = (text) => {
          return nativeStringIsWellFormed.call(text);
        };
      }
      configureTextEncoding(config);
    }
    return te;
  }
  function emulateEncodeInto(encodeUtf8) {
    return (text, dest) => {
      const bytes = encodeUtf8(text);
      dest.set(bytes);
      return { written: bytes.byteLength };
    };
  }

  // node_modules/@bufbuild/protobuf/dist/esm/wire/binary-encoding.js
  var WireType;
  (function(WireType2) {
    WireType2[WireType2["Varint"] = 0] = "Varint";
    WireType2[WireType2["Bit64"] = 1] = "Bit64";
    WireType2[WireType2["LengthDelimited"] = 2] = "LengthDelimited";
    WireType2[WireType2["StartGroup"] = 3] = "StartGroup";
    WireType2[WireType2["EndGroup"] = 4] = "EndGroup";
    WireType2[WireType2["Bit32"] = 5] = "Bit32";
  })(WireType || (WireType = {}));
  var UINT32_MAX = 4294967295;
  var INT32_MAX = 2147483647;
  var INT32_MIN = -2147483648;
  var BinaryWriter = class {
    constructor(encodeUtf8) {
      this.stackPos = [];
      this.encodeUtf8Into = encodeUtf8 ? emulateEncodeInto(encodeUtf8) : getTextEncoding().encodeUtf8Into;
      this.buffer = EMPTY_BUFFER;
      this.viewCache = EMPTY_VIEW;
      this.pos = 0;
    }
    ensureCapacity(size) {
      const required = this.pos + size;
      if (required > this.buffer.length) {
        let newLen = this.buffer.length || INITIAL_SIZE;
        while (newLen < required)
          newLen *= 2;
        const newBuf = new Uint8Array(newLen);
        if (this.pos > 0)
          newBuf.set(this.buffer);
        this.buffer = newBuf;
      }
    }
    /**
     * The DataView over `buffer`, rebuilt only if the buffer has grown since it
     * was last used.
     */
    view() {
      const bytes = this.buffer;
      const view = this.viewCache;
      if (view.byteLength === bytes.byteLength)
        return view;
      const newView = new DataView(bytes.buffer);
      this.viewCache = newView;
      return newView;
    }
    /**
     * Return all bytes written and reset this writer.
     */
    finish() {
      const result = this.buffer.slice(0, this.pos);
      this.pos = 0;
      this.stackPos = [];
      return result;
    }
    /**
     * Start a new fork for length-delimited data like a message
     * or a packed repeated field.
     *
     * Must be joined later with `join()`.
     */
    fork() {
      this.stackPos.push(this.pos);
      this.ensureCapacity(DEFAULT_LEN_PREFIX_SIZE);
      this.buffer[this.pos++] = 0;
      return this;
    }
    /**
     * Join the last fork. Write its length and bytes, then
     * return to the previous state.
     */
    join() {
      const forkPos = this.stackPos.pop();
      if (forkPos === void 0)
        throw new Error("invalid state, fork stack empty");
      const len = this.pos - forkPos - DEFAULT_LEN_PREFIX_SIZE;
      const lenPrefixSize = varint32Size(len);
      if (lenPrefixSize > DEFAULT_LEN_PREFIX_SIZE) {
        this.ensureCapacity(lenPrefixSize - DEFAULT_LEN_PREFIX_SIZE);
        this.buffer.copyWithin(forkPos + lenPrefixSize, forkPos + DEFAULT_LEN_PREFIX_SIZE, this.pos);
      }
      this.pos = forkPos;
      this.uint32(len);
      this.pos += len;
      return this;
    }
    /**
     * Writes a tag (field number and wire type).
     *
     * Equivalent to `uint32( (fieldNo << 3 | type) >>> 0 )`.
     *
     * Generated code should compute the tag ahead of time and call `uint32()`.
     */
    tag(fieldNo, type) {
      return this.uint32((fieldNo << 3 | type) >>> 0);
    }
    /**
     * Write a chunk of raw bytes.
     */
    raw(chunk) {
      this.ensureCapacity(chunk.length);
      this.buffer.set(chunk, this.pos);
      this.pos += chunk.length;
      return this;
    }
    /**
     * Write a `uint32` value, an unsigned 32 bit varint.
     */
    uint32(value) {
      assertUInt32(value);
      this.ensureCapacity(5);
      if (value < 128) {
        this.buffer[this.pos++] = value;
        return this;
      }
      while (value > 127) {
        this.buffer[this.pos++] = value & 127 | 128;
        value >>>= 7;
      }
      this.buffer[this.pos++] = value;
      return this;
    }
    /**
     * Write a `int32` value, a signed 32 bit varint.
     */
    int32(value) {
      assertInt32(value);
      if (value >= 0) {
        return this.uint32(value);
      }
      this.ensureCapacity(10);
      for (let i = 0; i < 9; i++) {
        this.buffer[this.pos++] = value & 127 | 128;
        value >>= 7;
      }
      this.buffer[this.pos++] = 1;
      return this;
    }
    /**
     * Write a `bool` value, a varint.
     */
    bool(value) {
      this.ensureCapacity(1);
      this.buffer[this.pos++] = value ? 1 : 0;
      return this;
    }
    /**
     * Write a `bytes` value, length-delimited arbitrary data.
     */
    bytes(value) {
      this.uint32(value.byteLength);
      return this.raw(value);
    }
    /**
     * Write a `string` value, length-delimited data converted to UTF-8 text.
     */
    string(value) {
      if (typeof value !== "string") {
        value = String(value);
      }
      const len = value.length;
      if (len <= ASCII_MAX_LENGTH) {
        this.ensureCapacity(len + 1);
        const ascii = this.buffer;
        let pos = this.pos;
        ascii[pos++] = len;
        let i = 0;
        for (; i < len; i++) {
          const code = value.charCodeAt(i);
          if (code > 127)
            break;
          ascii[pos++] = code;
        }
        if (i == len) {
          this.pos = pos;
          return this;
        }
      }
      this.ensureCapacity(len * 3 + 5);
      const lenPrefixSizeGuess = varint32Size(len);
      const buf = this.buffer;
      const start2 = this.pos;
      const { written } = this.encodeUtf8Into(value, buf.subarray(start2 + lenPrefixSizeGuess));
      const lenPrefixSize = varint32Size(written);
      if (lenPrefixSize != lenPrefixSizeGuess) {
        buf.copyWithin(start2 + lenPrefixSize, start2 + lenPrefixSizeGuess, start2 + lenPrefixSizeGuess + written);
      }
      this.uint32(written);
      this.pos += written;
      return this;
    }
    /**
     * Write a `float` value, 32-bit floating point number.
     */
    float(value) {
      assertFloat32(value);
      this.ensureCapacity(4);
      this.view().setFloat32(this.pos, value, true);
      this.pos += 4;
      return this;
    }
    /**
     * Write a `double` value, a 64-bit floating point number.
     */
    double(value) {
      this.ensureCapacity(8);
      this.view().setFloat64(this.pos, value, true);
      this.pos += 8;
      return this;
    }
    /**
     * Write a `fixed32` value, an unsigned, fixed-length 32-bit integer.
     */
    fixed32(value) {
      assertUInt32(value);
      this.ensureCapacity(4);
      this.view().setUint32(this.pos, value, true);
      this.pos += 4;
      return this;
    }
    /**
     * Write a `sfixed32` value, a signed, fixed-length 32-bit integer.
     */
    sfixed32(value) {
      assertInt32(value);
      this.ensureCapacity(4);
      this.view().setInt32(this.pos, value, true);
      this.pos += 4;
      return this;
    }
    /**
     * Write a `sint32` value, a signed, zigzag-encoded 32-bit varint.
     */
    sint32(value) {
      assertInt32(value);
      return this.uint32((value << 1 ^ value >> 31) >>> 0);
    }
    /**
     * Write a `sfixed64` value, a signed, fixed-length 64-bit integer.
     */
    sfixed64(value) {
      const tc = protoInt64.enc(value);
      this.ensureCapacity(8);
      const view = this.view();
      view.setInt32(this.pos, tc.lo, true);
      view.setInt32(this.pos + 4, tc.hi, true);
      this.pos += 8;
      return this;
    }
    /**
     * Write a `fixed64` value, an unsigned, fixed-length 64 bit integer.
     */
    fixed64(value) {
      const tc = protoInt64.uEnc(value);
      this.ensureCapacity(8);
      const view = this.view();
      view.setInt32(this.pos, tc.lo, true);
      view.setInt32(this.pos + 4, tc.hi, true);
      this.pos += 8;
      return this;
    }
    /**
     * Write a `int64` value, a signed 64-bit varint.
     */
    int64(value) {
      const tc = protoInt64.enc(value);
      return this.writeVarint64(tc.lo, tc.hi);
    }
    /**
     * Write a `sint64` value, a signed, zig-zag-encoded 64-bit varint.
     */
    sint64(value) {
      const tc = protoInt64.enc(value), sign = tc.hi >> 31, lo = tc.lo << 1 ^ sign, hi = (tc.hi << 1 | tc.lo >>> 31) ^ sign;
      return this.writeVarint64(lo, hi);
    }
    /**
     * Write a `uint64` value, an unsigned 64-bit varint.
     */
    uint64(value) {
      const tc = protoInt64.uEnc(value);
      return this.writeVarint64(tc.lo, tc.hi);
    }
    /**
     * Write a 64-bit varint directly into the buffer. Accepts the value as
     * split low/high 32-bit words.
     *
     * Ported from varint64write() to avoid the intermediate number[] buffer.
     * See https://github.com/protocolbuffers/protobuf/blob/8a71927d74a4ce34efe2d8769fda198f52d20d12/js/experimental/runtime/kernel/writer.js#L344
     */
    writeVarint64(lo, hi) {
      this.ensureCapacity(10);
      const buf = this.buffer;
      let pos = this.pos;
      for (let i = 0; i < 28; i = i + 7) {
        const shift = lo >>> i;
        const hasNext = !(shift >>> 7 == 0 && hi == 0);
        buf[pos++] = (hasNext ? shift | 128 : shift) & 255;
        if (!hasNext) {
          this.pos = pos;
          return this;
        }
      }
      const splitBits = lo >>> 28 & 15 | (hi & 7) << 4;
      const hasMoreBits = !(hi >> 3 == 0);
      buf[pos++] = (hasMoreBits ? splitBits | 128 : splitBits) & 255;
      if (!hasMoreBits) {
        this.pos = pos;
        return this;
      }
      for (let i = 3; i < 31; i = i + 7) {
        const shift = hi >>> i;
        const hasNext = !(shift >>> 7 == 0);
        buf[pos++] = (hasNext ? shift | 128 : shift) & 255;
        if (!hasNext) {
          this.pos = pos;
          return this;
        }
      }
      buf[pos++] = hi >>> 31 & 1;
      this.pos = pos;
      return this;
    }
  };
  var INITIAL_SIZE = 128;
  var DEFAULT_LEN_PREFIX_SIZE = 1;
  var EMPTY_BUFFER = new Uint8Array(0);
  var EMPTY_VIEW = new DataView(EMPTY_BUFFER.buffer);
  var ASCII_MAX_LENGTH = 32;
  function varint32Size(value) {
    if (value < 128)
      return 1;
    if (value < 16384)
      return 2;
    if (value < 2097152)
      return 3;
    if (value < 268435456)
      return 4;
    return 5;
  }
  var BinaryReader = class {
    constructor(buf, decodeUtf8 = getTextEncoding().decodeUtf8) {
      this.decodeUtf8 = decodeUtf8;
      this.varint64Lo = 0;
      this.varint64Hi = 0;
      this.varint64 = varint64read;
      this.uint32 = varint32read;
      this.buf = buf;
      this.len = buf.length;
      this.pos = 0;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    }
    /**
     * Reads a tag - field number and wire type. Tags are uint32 varints; values
     * that do not fit in uint32 are rejected.
     */
    tag() {
      const start2 = this.pos;
      const tag = this.uint32();
      const bytesRead = this.pos - start2;
      if (bytesRead > 5 || bytesRead == 5 && this.buf[this.pos - 1] > 15) {
        throw new Error("illegal tag: varint overflows uint32");
      }
      const fieldNo = tag >>> 3;
      const wireType = tag & 7;
      if (fieldNo <= 0 || wireType > 5) {
        throw new Error("illegal tag: field no " + fieldNo + " wire type " + wireType);
      }
      return [fieldNo, wireType];
    }
    /**
     * Skip one element and return the skipped data.
     *
     * When skipping StartGroup, provide the tags field number to check for
     * matching field number in the EndGroup tag. Recursion into nested groups
     * is guarded by the `recursionLimit` argument: When the limit is reached,
     * this method throws.
     */
    skip(wireType, fieldNo, recursionLimit = 100) {
      let start2 = this.pos;
      switch (wireType) {
        case WireType.Varint:
          while (this.buf[this.pos++] & 128) {
          }
          break;
        // @ts-ignore TS7029: Fallthrough case in switch -- ignore instead of expect-error for compiler settings without noFallthroughCasesInSwitch: true
        case WireType.Bit64:
          this.pos += 4;
        case WireType.Bit32:
          this.pos += 4;
          break;
        case WireType.LengthDelimited:
          let len = this.uint32();
          this.pos += len;
          break;
        case WireType.StartGroup:
          if (recursionLimit <= 0) {
            throw new Error("maximum recursion depth reached");
          }
          for (; ; ) {
            const [fn, wt] = this.tag();
            if (wt === WireType.EndGroup) {
              if (fieldNo !== void 0 && fn !== fieldNo) {
                throw new Error("invalid end group tag");
              }
              break;
            }
            this.skip(wt, fn, recursionLimit - 1);
          }
          break;
        default:
          throw new Error("cant skip wire type " + wireType);
      }
      this.assertBounds();
      return this.buf.subarray(start2, this.pos);
    }
    /**
     * Throws error if position in byte array is out of range.
     */
    assertBounds() {
      if (this.pos > this.len)
        throw new RangeError("premature EOF");
    }
    /**
     * Read a `int32` field, a signed 32 bit varint.
     */
    int32() {
      return this.uint32() | 0;
    }
    /**
     * Read a `sint32` field, a signed, zigzag-encoded 32-bit varint.
     */
    sint32() {
      let zze = this.uint32();
      return zze >>> 1 ^ -(zze & 1);
    }
    /**
     * Read a `int64` field, a signed 64-bit varint.
     */
    int64() {
      this.varint64();
      return protoInt64.dec(this.varint64Lo, this.varint64Hi);
    }
    /**
     * Read a `uint64` field, an unsigned 64-bit varint.
     */
    uint64() {
      this.varint64();
      return protoInt64.uDec(this.varint64Lo, this.varint64Hi);
    }
    /**
     * Read a `sint64` field, a signed, zig-zag-encoded 64-bit varint.
     */
    sint64() {
      this.varint64();
      let lo = this.varint64Lo;
      let hi = this.varint64Hi;
      let s = -(lo & 1);
      lo = (lo >>> 1 | (hi & 1) << 31) ^ s;
      hi = hi >>> 1 ^ s;
      return protoInt64.dec(lo, hi);
    }
    /**
     * Read a `bool` field, a variant.
     */
    bool() {
      const b = this.buf[this.pos];
      if (b < 128) {
        this.pos++;
        return b !== 0;
      }
      this.varint64();
      return this.varint64Lo !== 0 || this.varint64Hi !== 0;
    }
    /**
     * Read a `fixed32` field, an unsigned, fixed-length 32-bit integer.
     */
    fixed32() {
      return this.view.getUint32((this.pos += 4) - 4, true);
    }
    /**
     * Read a `sfixed32` field, a signed, fixed-length 32-bit integer.
     */
    sfixed32() {
      return this.view.getInt32((this.pos += 4) - 4, true);
    }
    /**
     * Read a `fixed64` field, an unsigned, fixed-length 64 bit integer.
     */
    fixed64() {
      return protoInt64.uDec(this.sfixed32(), this.sfixed32());
    }
    /**
     * Read a `fixed64` field, a signed, fixed-length 64-bit integer.
     */
    sfixed64() {
      return protoInt64.dec(this.sfixed32(), this.sfixed32());
    }
    /**
     * Read a `float` field, 32-bit floating point number.
     */
    float() {
      return this.view.getFloat32((this.pos += 4) - 4, true);
    }
    /**
     * Read a `double` field, a 64-bit floating point number.
     */
    double() {
      return this.view.getFloat64((this.pos += 8) - 8, true);
    }
    /**
     * Read a `bytes` field, length-delimited arbitrary data.
     */
    bytes() {
      let len = this.uint32(), start2 = this.pos;
      this.pos += len;
      this.assertBounds();
      return this.buf.subarray(start2, start2 + len);
    }
    /**
     * Read a `string` field, length-delimited data converted to UTF-8 text. If
     * `strict` is true, throw on invalid UTF-8 instead of substituting U+FFFD.
     */
    string(strict) {
      const len = this.uint32();
      const start2 = this.pos;
      this.pos += len;
      this.assertBounds();
      const buf = this.buf;
      if (len <= ASCII_MAX_LENGTH) {
        const codes = new Array(len);
        for (let i = 0; i < len; i++) {
          const byte = buf[start2 + i];
          if (byte > 127) {
            return this.decodeUtf8(buf.subarray(start2, this.pos), strict);
          }
          codes[i] = byte;
        }
        return String.fromCharCode.apply(String, codes);
      }
      return this.decodeUtf8(buf.subarray(start2, this.pos), strict);
    }
  };
  function assertInt32(arg) {
    if (typeof arg == "string") {
      arg = Number(arg);
    } else if (typeof arg != "number") {
      throw new Error("invalid int32: " + typeof arg);
    }
    if (!Number.isInteger(arg) || arg > INT32_MAX || arg < INT32_MIN)
      throw new Error("invalid int32: " + arg);
  }
  function assertUInt32(arg) {
    if (typeof arg == "string") {
      arg = Number(arg);
    } else if (typeof arg != "number") {
      throw new Error("invalid uint32: " + typeof arg);
    }
    if (!Number.isInteger(arg) || arg > UINT32_MAX || arg < 0)
      throw new Error("invalid uint32: " + arg);
  }
  function assertFloat32(arg) {
    if (typeof arg == "string") {
      const o = arg;
      arg = Number(arg);
      if (Number.isNaN(arg) && o !== "NaN") {
        throw new Error("invalid float32: " + o);
      }
    } else if (typeof arg != "number") {
      throw new Error("invalid float32: " + typeof arg);
    }
    if (!Number.isFinite(Math.fround(arg)) && Number.isFinite(arg)) {
      throw new Error("invalid float32: " + arg);
    }
  }

  // src/gen/google/protobuf/duration.ts
  function createBaseDuration() {
    return { seconds: 0, nanos: 0 };
  }
  var Duration = {
    encode(message, writer = new BinaryWriter()) {
      if (message.seconds !== 0) {
        writer.uint32(8).int64(message.seconds);
      }
      if (message.nanos !== 0) {
        writer.uint32(16).int32(message.nanos);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseDuration();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.seconds = longToNumber(reader.int64());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.nanos = reader.int32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return Duration.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseDuration();
      message.seconds = object.seconds ?? 0;
      message.nanos = object.nanos ?? 0;
      return message;
    }
  };
  function longToNumber(int64) {
    const num = globalThis.Number(int64.toString());
    if (num > globalThis.Number.MAX_SAFE_INTEGER) {
      throw new globalThis.Error("Value is larger than Number.MAX_SAFE_INTEGER");
    }
    if (num < globalThis.Number.MIN_SAFE_INTEGER) {
      throw new globalThis.Error("Value is smaller than Number.MIN_SAFE_INTEGER");
    }
    return num;
  }

  // src/gen/admission/v1/admission.ts
  var protobufPackage = "admission.v1";
  var protobufFileName = "admission/v1/admission.proto";
  var SubmitMode = /* @__PURE__ */ ((SubmitMode2) => {
    SubmitMode2[SubmitMode2["SUBMIT_MODE_UNSPECIFIED"] = 0] = "SUBMIT_MODE_UNSPECIFIED";
    SubmitMode2[SubmitMode2["SUBMIT_MODE_QUEUE"] = 1] = "SUBMIT_MODE_QUEUE";
    SubmitMode2[SubmitMode2["SUBMIT_MODE_TRY"] = 2] = "SUBMIT_MODE_TRY";
    SubmitMode2[SubmitMode2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return SubmitMode2;
  })(SubmitMode || {});
  var TicketState = /* @__PURE__ */ ((TicketState2) => {
    TicketState2[TicketState2["TICKET_STATE_UNSPECIFIED"] = 0] = "TICKET_STATE_UNSPECIFIED";
    TicketState2[TicketState2["TICKET_STATE_QUEUED"] = 1] = "TICKET_STATE_QUEUED";
    TicketState2[TicketState2["TICKET_STATE_ADMITTED"] = 2] = "TICKET_STATE_ADMITTED";
    TicketState2[TicketState2["TICKET_STATE_RELEASED"] = 3] = "TICKET_STATE_RELEASED";
    TicketState2[TicketState2["TICKET_STATE_CANCELLED"] = 4] = "TICKET_STATE_CANCELLED";
    TicketState2[TicketState2["TICKET_STATE_SHED"] = 5] = "TICKET_STATE_SHED";
    TicketState2[TicketState2["TICKET_STATE_EXPIRED"] = 6] = "TICKET_STATE_EXPIRED";
    TicketState2[TicketState2["TICKET_STATE_PARKED"] = 7] = "TICKET_STATE_PARKED";
    TicketState2[TicketState2["TICKET_STATE_SUPERSEDED"] = 8] = "TICKET_STATE_SUPERSEDED";
    TicketState2[TicketState2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return TicketState2;
  })(TicketState || {});
  var Blocker = /* @__PURE__ */ ((Blocker2) => {
    Blocker2[Blocker2["BLOCKER_UNSPECIFIED"] = 0] = "BLOCKER_UNSPECIFIED";
    Blocker2[Blocker2["BLOCKER_TOTAL"] = 1] = "BLOCKER_TOTAL";
    Blocker2[Blocker2["BLOCKER_SUBJECT"] = 2] = "BLOCKER_SUBJECT";
    Blocker2[Blocker2["BLOCKER_ACCOUNT"] = 3] = "BLOCKER_ACCOUNT";
    Blocker2[Blocker2["BLOCKER_MEMORY"] = 4] = "BLOCKER_MEMORY";
    Blocker2[Blocker2["BLOCKER_TURN"] = 5] = "BLOCKER_TURN";
    Blocker2[Blocker2["BLOCKER_STATE_LOSS"] = 6] = "BLOCKER_STATE_LOSS";
    Blocker2[Blocker2["BLOCKER_KEY"] = 7] = "BLOCKER_KEY";
    Blocker2[Blocker2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return Blocker2;
  })(Blocker || {});
  var KeyPolicy = /* @__PURE__ */ ((KeyPolicy2) => {
    KeyPolicy2[KeyPolicy2["KEY_POLICY_NONE"] = 0] = "KEY_POLICY_NONE";
    KeyPolicy2[KeyPolicy2["KEY_POLICY_KEEP_NEWEST"] = 1] = "KEY_POLICY_KEEP_NEWEST";
    KeyPolicy2[KeyPolicy2["KEY_POLICY_SERIAL"] = 2] = "KEY_POLICY_SERIAL";
    KeyPolicy2[KeyPolicy2["KEY_POLICY_SERIAL_KEEP_NEWEST"] = 3] = "KEY_POLICY_SERIAL_KEEP_NEWEST";
    KeyPolicy2[KeyPolicy2["KEY_POLICY_REJECT_NEW"] = 4] = "KEY_POLICY_REJECT_NEW";
    KeyPolicy2[KeyPolicy2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return KeyPolicy2;
  })(KeyPolicy || {});
  var Outcome = /* @__PURE__ */ ((Outcome2) => {
    Outcome2[Outcome2["OUTCOME_UNSPECIFIED"] = 0] = "OUTCOME_UNSPECIFIED";
    Outcome2[Outcome2["OUTCOME_OK"] = 1] = "OUTCOME_OK";
    Outcome2[Outcome2["OUTCOME_RATE_LIMITED"] = 2] = "OUTCOME_RATE_LIMITED";
    Outcome2[Outcome2["OUTCOME_OVERLOADED"] = 3] = "OUTCOME_OVERLOADED";
    Outcome2[Outcome2["OUTCOME_FAILED"] = 4] = "OUTCOME_FAILED";
    Outcome2[Outcome2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return Outcome2;
  })(Outcome || {});
  var Decision = /* @__PURE__ */ ((Decision2) => {
    Decision2[Decision2["DECISION_UNSPECIFIED"] = 0] = "DECISION_UNSPECIFIED";
    Decision2[Decision2["DECISION_ALLOW"] = 1] = "DECISION_ALLOW";
    Decision2[Decision2["DECISION_DENY"] = 2] = "DECISION_DENY";
    Decision2[Decision2["DECISION_UNKNOWN"] = 3] = "DECISION_UNKNOWN";
    Decision2[Decision2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return Decision2;
  })(Decision || {});
  var Coverage = /* @__PURE__ */ ((Coverage2) => {
    Coverage2[Coverage2["COVERAGE_UNSPECIFIED"] = 0] = "COVERAGE_UNSPECIFIED";
    Coverage2[Coverage2["COVERAGE_COMPLETE"] = 1] = "COVERAGE_COMPLETE";
    Coverage2[Coverage2["COVERAGE_PARTIAL"] = 2] = "COVERAGE_PARTIAL";
    Coverage2[Coverage2["COVERAGE_UNKNOWN"] = 3] = "COVERAGE_UNKNOWN";
    Coverage2[Coverage2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return Coverage2;
  })(Coverage || {});
  var ReservationState = /* @__PURE__ */ ((ReservationState2) => {
    ReservationState2[ReservationState2["RESERVATION_STATE_UNSPECIFIED"] = 0] = "RESERVATION_STATE_UNSPECIFIED";
    ReservationState2[ReservationState2["RESERVATION_STATE_RESERVED"] = 1] = "RESERVATION_STATE_RESERVED";
    ReservationState2[ReservationState2["RESERVATION_STATE_UNCERTAIN"] = 2] = "RESERVATION_STATE_UNCERTAIN";
    ReservationState2[ReservationState2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return ReservationState2;
  })(ReservationState || {});
  var Resolution = /* @__PURE__ */ ((Resolution2) => {
    Resolution2[Resolution2["RESOLUTION_UNSPECIFIED"] = 0] = "RESOLUTION_UNSPECIFIED";
    Resolution2[Resolution2["RESOLUTION_CONSUMED"] = 1] = "RESOLUTION_CONSUMED";
    Resolution2[Resolution2["RESOLUTION_RELEASED"] = 2] = "RESOLUTION_RELEASED";
    Resolution2[Resolution2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return Resolution2;
  })(Resolution || {});
  var LimitsSource = /* @__PURE__ */ ((LimitsSource2) => {
    LimitsSource2[LimitsSource2["LIMITS_SOURCE_UNSPECIFIED"] = 0] = "LIMITS_SOURCE_UNSPECIFIED";
    LimitsSource2[LimitsSource2["LIMITS_SOURCE_FILE"] = 1] = "LIMITS_SOURCE_FILE";
    LimitsSource2[LimitsSource2["LIMITS_SOURCE_OPERATOR"] = 2] = "LIMITS_SOURCE_OPERATOR";
    LimitsSource2[LimitsSource2["UNRECOGNIZED"] = -1] = "UNRECOGNIZED";
    return LimitsSource2;
  })(LimitsSource || {});
  function createBaseSubmitRequest() {
    return {
      hostId: "",
      instanceId: "",
      subject: "",
      accountId: "",
      runId: "",
      mode: 0,
      rssMb: void 0,
      priority: 0,
      resubmitExpired: false,
      key: "",
      keyPolicy: 0,
      supersedeRunning: false,
      debounce: void 0,
      debounceMax: void 0
    };
  }
  var SubmitRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.instanceId !== "") {
        writer.uint32(18).string(message.instanceId);
      }
      if (message.subject !== "") {
        writer.uint32(26).string(message.subject);
      }
      if (message.accountId !== "") {
        writer.uint32(34).string(message.accountId);
      }
      if (message.runId !== "") {
        writer.uint32(42).string(message.runId);
      }
      if (message.mode !== 0) {
        writer.uint32(48).int32(message.mode);
      }
      if (message.rssMb !== void 0) {
        writer.uint32(56).uint32(message.rssMb);
      }
      if (message.priority !== 0) {
        writer.uint32(64).uint32(message.priority);
      }
      if (message.resubmitExpired !== false) {
        writer.uint32(72).bool(message.resubmitExpired);
      }
      if (message.key !== "") {
        writer.uint32(82).string(message.key);
      }
      if (message.keyPolicy !== 0) {
        writer.uint32(88).int32(message.keyPolicy);
      }
      if (message.supersedeRunning !== false) {
        writer.uint32(96).bool(message.supersedeRunning);
      }
      if (message.debounce !== void 0) {
        Duration.encode(message.debounce, writer.uint32(106).fork()).join();
      }
      if (message.debounceMax !== void 0) {
        Duration.encode(message.debounceMax, writer.uint32(114).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSubmitRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.instanceId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.mode = reader.int32();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.rssMb = reader.uint32();
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.priority = reader.uint32();
              continue;
            }
            case 9: {
              if (tag !== 72) {
                break;
              }
              message.resubmitExpired = reader.bool();
              continue;
            }
            case 10: {
              if (tag !== 82) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 11: {
              if (tag !== 88) {
                break;
              }
              message.keyPolicy = reader.int32();
              continue;
            }
            case 12: {
              if (tag !== 96) {
                break;
              }
              message.supersedeRunning = reader.bool();
              continue;
            }
            case 13: {
              if (tag !== 106) {
                break;
              }
              message.debounce = Duration.decode(reader, reader.uint32());
              continue;
            }
            case 14: {
              if (tag !== 114) {
                break;
              }
              message.debounceMax = Duration.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SubmitRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSubmitRequest();
      message.hostId = object.hostId ?? "";
      message.instanceId = object.instanceId ?? "";
      message.subject = object.subject ?? "";
      message.accountId = object.accountId ?? "";
      message.runId = object.runId ?? "";
      message.mode = object.mode ?? 0;
      message.rssMb = object.rssMb ?? void 0;
      message.priority = object.priority ?? 0;
      message.resubmitExpired = object.resubmitExpired ?? false;
      message.key = object.key ?? "";
      message.keyPolicy = object.keyPolicy ?? 0;
      message.supersedeRunning = object.supersedeRunning ?? false;
      message.debounce = object.debounce !== void 0 && object.debounce !== null ? Duration.fromPartial(object.debounce) : void 0;
      message.debounceMax = object.debounceMax !== void 0 && object.debounceMax !== null ? Duration.fromPartial(object.debounceMax) : void 0;
      return message;
    }
  };
  function createBaseSubmitResponse() {
    return {
      ticketId: "",
      state: 0,
      position: 0,
      leaseTtlMs: 0,
      grant: 0,
      etaMs: 0,
      shadowReason: "",
      blockedBy: 0,
      supersededBy: ""
    };
  }
  var SubmitResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.state !== 0) {
        writer.uint32(16).int32(message.state);
      }
      if (message.position !== 0) {
        writer.uint32(24).uint32(message.position);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(32).uint32(message.leaseTtlMs);
      }
      if (message.grant !== 0) {
        writer.uint32(40).uint64(message.grant);
      }
      if (message.etaMs !== 0) {
        writer.uint32(48).uint32(message.etaMs);
      }
      if (message.shadowReason !== "") {
        writer.uint32(58).string(message.shadowReason);
      }
      if (message.blockedBy !== 0) {
        writer.uint32(64).int32(message.blockedBy);
      }
      if (message.supersededBy !== "") {
        writer.uint32(74).string(message.supersededBy);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSubmitResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.position = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.leaseTtlMs = reader.uint32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.etaMs = reader.uint32();
              continue;
            }
            case 7: {
              if (tag !== 58) {
                break;
              }
              message.shadowReason = reader.string();
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.blockedBy = reader.int32();
              continue;
            }
            case 9: {
              if (tag !== 74) {
                break;
              }
              message.supersededBy = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SubmitResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSubmitResponse();
      message.ticketId = object.ticketId ?? "";
      message.state = object.state ?? 0;
      message.position = object.position ?? 0;
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      message.grant = object.grant ?? 0;
      message.etaMs = object.etaMs ?? 0;
      message.shadowReason = object.shadowReason ?? "";
      message.blockedBy = object.blockedBy ?? 0;
      message.supersededBy = object.supersededBy ?? "";
      return message;
    }
  };
  function createBaseWaitRequest() {
    return { ticketId: "" };
  }
  var WaitRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseWaitRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return WaitRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseWaitRequest();
      message.ticketId = object.ticketId ?? "";
      return message;
    }
  };
  function createBaseWaitEvent() {
    return {
      ticketId: "",
      state: 0,
      position: 0,
      grant: 0,
      etaMs: 0,
      blockedBy: 0,
      leaseRemainingMs: 0,
      supersededBy: ""
    };
  }
  var WaitEvent = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.state !== 0) {
        writer.uint32(16).int32(message.state);
      }
      if (message.position !== 0) {
        writer.uint32(24).uint32(message.position);
      }
      if (message.grant !== 0) {
        writer.uint32(32).uint64(message.grant);
      }
      if (message.etaMs !== 0) {
        writer.uint32(40).uint32(message.etaMs);
      }
      if (message.blockedBy !== 0) {
        writer.uint32(48).int32(message.blockedBy);
      }
      if (message.leaseRemainingMs !== 0) {
        writer.uint32(56).uint32(message.leaseRemainingMs);
      }
      if (message.supersededBy !== "") {
        writer.uint32(66).string(message.supersededBy);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseWaitEvent();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.position = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.etaMs = reader.uint32();
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.blockedBy = reader.int32();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.leaseRemainingMs = reader.uint32();
              continue;
            }
            case 8: {
              if (tag !== 66) {
                break;
              }
              message.supersededBy = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return WaitEvent.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseWaitEvent();
      message.ticketId = object.ticketId ?? "";
      message.state = object.state ?? 0;
      message.position = object.position ?? 0;
      message.grant = object.grant ?? 0;
      message.etaMs = object.etaMs ?? 0;
      message.blockedBy = object.blockedBy ?? 0;
      message.leaseRemainingMs = object.leaseRemainingMs ?? 0;
      message.supersededBy = object.supersededBy ?? "";
      return message;
    }
  };
  function createBaseRenewRequest() {
    return { ticketIds: [], rssMb: void 0 };
  }
  var RenewRequest = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.ticketIds) {
        writer.uint32(10).string(v);
      }
      if (message.rssMb !== void 0) {
        writer.uint32(16).uint32(message.rssMb);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRenewRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketIds.push(reader.string());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.rssMb = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RenewRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRenewRequest();
      message.ticketIds = object.ticketIds?.map((e) => e) || [];
      message.rssMb = object.rssMb ?? void 0;
      return message;
    }
  };
  function createBaseRenewResponse() {
    return { tickets: [] };
  }
  var RenewResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.tickets) {
        RenewedTicket.encode(v, writer.uint32(10).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRenewResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.tickets.push(RenewedTicket.decode(reader, reader.uint32()));
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RenewResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRenewResponse();
      message.tickets = object.tickets?.map((e) => RenewedTicket.fromPartial(e)) || [];
      return message;
    }
  };
  function createBaseRenewedTicket() {
    return { ticketId: "", state: 0, leaseTtlMs: 0, supersededBy: "" };
  }
  var RenewedTicket = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.state !== 0) {
        writer.uint32(16).int32(message.state);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(24).uint32(message.leaseTtlMs);
      }
      if (message.supersededBy !== "") {
        writer.uint32(34).string(message.supersededBy);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRenewedTicket();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.leaseTtlMs = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.supersededBy = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RenewedTicket.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRenewedTicket();
      message.ticketId = object.ticketId ?? "";
      message.state = object.state ?? 0;
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      message.supersededBy = object.supersededBy ?? "";
      return message;
    }
  };
  function createBaseReleaseRequest() {
    return { ticketId: "", hostId: "", runId: "", outcome: 0, latencyMs: void 0 };
  }
  var ReleaseRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.hostId !== "") {
        writer.uint32(18).string(message.hostId);
      }
      if (message.runId !== "") {
        writer.uint32(26).string(message.runId);
      }
      if (message.outcome !== 0) {
        writer.uint32(32).int32(message.outcome);
      }
      if (message.latencyMs !== void 0) {
        writer.uint32(40).uint32(message.latencyMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseReleaseRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.outcome = reader.int32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.latencyMs = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ReleaseRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseReleaseRequest();
      message.ticketId = object.ticketId ?? "";
      message.hostId = object.hostId ?? "";
      message.runId = object.runId ?? "";
      message.outcome = object.outcome ?? 0;
      message.latencyMs = object.latencyMs ?? void 0;
      return message;
    }
  };
  function createBaseReleaseResponse() {
    return { previousState: 0, ticketId: "" };
  }
  var ReleaseResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.previousState !== 0) {
        writer.uint32(8).int32(message.previousState);
      }
      if (message.ticketId !== "") {
        writer.uint32(18).string(message.ticketId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseReleaseResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.previousState = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ReleaseResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseReleaseResponse();
      message.previousState = object.previousState ?? 0;
      message.ticketId = object.ticketId ?? "";
      return message;
    }
  };
  function createBaseGetStatsRequest() {
    return { hostId: "" };
  }
  var GetStatsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetStatsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetStatsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetStatsRequest();
      message.hostId = object.hostId ?? "";
      return message;
    }
  };
  function createBaseStats() {
    return {
      total: 0,
      queueTotal: 0,
      inFlight: 0,
      queued: 0,
      admitted: 0,
      rejected: 0,
      shed: 0,
      cancelled: 0,
      expired: 0,
      parked: 0,
      maxRssMb: 0,
      subjects: [],
      accounts: [],
      released: 0,
      reportedRssMb: 0,
      queuePerSubject: 0,
      queueHardTotal: 0,
      draining: false,
      reservationsOpen: 0,
      reservationsUncertain: 0,
      authorizeAllowed: 0,
      authorizeDenied: 0,
      authorizeDeferred: 0,
      settled: 0,
      perSubject: 0,
      mode: "",
      shadowQueued: 0,
      shadowBusy: 0,
      shadowQueueFull: 0,
      shadowMemoryPressure: 0,
      holdAvgMs: 0,
      outcomeOk: 0,
      outcomeRateLimited: 0,
      outcomeOverloaded: 0,
      outcomeFailed: 0,
      latencySumMs: 0,
      latencyCount: 0,
      accountsCapped: false,
      reclaimed: 0,
      learningLeftMs: 0,
      stateLosses: 0,
      lastStateLossUnixMs: 0,
      superseded: 0,
      keyRefused: 0
    };
  }
  var Stats = {
    encode(message, writer = new BinaryWriter()) {
      if (message.total !== 0) {
        writer.uint32(8).uint32(message.total);
      }
      if (message.queueTotal !== 0) {
        writer.uint32(16).uint32(message.queueTotal);
      }
      if (message.inFlight !== 0) {
        writer.uint32(24).uint32(message.inFlight);
      }
      if (message.queued !== 0) {
        writer.uint32(32).uint32(message.queued);
      }
      if (message.admitted !== 0) {
        writer.uint32(40).uint64(message.admitted);
      }
      if (message.rejected !== 0) {
        writer.uint32(48).uint64(message.rejected);
      }
      if (message.shed !== 0) {
        writer.uint32(56).uint64(message.shed);
      }
      if (message.cancelled !== 0) {
        writer.uint32(64).uint64(message.cancelled);
      }
      if (message.expired !== 0) {
        writer.uint32(72).uint64(message.expired);
      }
      if (message.parked !== 0) {
        writer.uint32(80).uint32(message.parked);
      }
      if (message.maxRssMb !== 0) {
        writer.uint32(88).uint32(message.maxRssMb);
      }
      for (const v of message.subjects) {
        SubjectStats.encode(v, writer.uint32(98).fork()).join();
      }
      for (const v of message.accounts) {
        AccountStats.encode(v, writer.uint32(106).fork()).join();
      }
      if (message.released !== 0) {
        writer.uint32(112).uint64(message.released);
      }
      if (message.reportedRssMb !== 0) {
        writer.uint32(120).uint32(message.reportedRssMb);
      }
      if (message.queuePerSubject !== 0) {
        writer.uint32(128).uint32(message.queuePerSubject);
      }
      if (message.queueHardTotal !== 0) {
        writer.uint32(136).uint32(message.queueHardTotal);
      }
      if (message.draining !== false) {
        writer.uint32(144).bool(message.draining);
      }
      if (message.reservationsOpen !== 0) {
        writer.uint32(152).uint64(message.reservationsOpen);
      }
      if (message.reservationsUncertain !== 0) {
        writer.uint32(160).uint64(message.reservationsUncertain);
      }
      if (message.authorizeAllowed !== 0) {
        writer.uint32(168).uint64(message.authorizeAllowed);
      }
      if (message.authorizeDenied !== 0) {
        writer.uint32(176).uint64(message.authorizeDenied);
      }
      if (message.authorizeDeferred !== 0) {
        writer.uint32(184).uint64(message.authorizeDeferred);
      }
      if (message.settled !== 0) {
        writer.uint32(192).uint64(message.settled);
      }
      if (message.perSubject !== 0) {
        writer.uint32(200).uint32(message.perSubject);
      }
      if (message.mode !== "") {
        writer.uint32(210).string(message.mode);
      }
      if (message.shadowQueued !== 0) {
        writer.uint32(216).uint64(message.shadowQueued);
      }
      if (message.shadowBusy !== 0) {
        writer.uint32(224).uint64(message.shadowBusy);
      }
      if (message.shadowQueueFull !== 0) {
        writer.uint32(232).uint64(message.shadowQueueFull);
      }
      if (message.shadowMemoryPressure !== 0) {
        writer.uint32(240).uint64(message.shadowMemoryPressure);
      }
      if (message.holdAvgMs !== 0) {
        writer.uint32(248).uint32(message.holdAvgMs);
      }
      if (message.outcomeOk !== 0) {
        writer.uint32(256).uint64(message.outcomeOk);
      }
      if (message.outcomeRateLimited !== 0) {
        writer.uint32(264).uint64(message.outcomeRateLimited);
      }
      if (message.outcomeOverloaded !== 0) {
        writer.uint32(272).uint64(message.outcomeOverloaded);
      }
      if (message.outcomeFailed !== 0) {
        writer.uint32(280).uint64(message.outcomeFailed);
      }
      if (message.latencySumMs !== 0) {
        writer.uint32(288).uint64(message.latencySumMs);
      }
      if (message.latencyCount !== 0) {
        writer.uint32(296).uint64(message.latencyCount);
      }
      if (message.accountsCapped !== false) {
        writer.uint32(304).bool(message.accountsCapped);
      }
      if (message.reclaimed !== 0) {
        writer.uint32(312).uint64(message.reclaimed);
      }
      if (message.learningLeftMs !== 0) {
        writer.uint32(320).uint32(message.learningLeftMs);
      }
      if (message.stateLosses !== 0) {
        writer.uint32(328).uint64(message.stateLosses);
      }
      if (message.lastStateLossUnixMs !== 0) {
        writer.uint32(336).uint64(message.lastStateLossUnixMs);
      }
      if (message.superseded !== 0) {
        writer.uint32(344).uint64(message.superseded);
      }
      if (message.keyRefused !== 0) {
        writer.uint32(352).uint64(message.keyRefused);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseStats();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.total = reader.uint32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.queueTotal = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.inFlight = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.queued = reader.uint32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.admitted = longToNumber2(reader.uint64());
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.rejected = longToNumber2(reader.uint64());
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.shed = longToNumber2(reader.uint64());
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.cancelled = longToNumber2(reader.uint64());
              continue;
            }
            case 9: {
              if (tag !== 72) {
                break;
              }
              message.expired = longToNumber2(reader.uint64());
              continue;
            }
            case 10: {
              if (tag !== 80) {
                break;
              }
              message.parked = reader.uint32();
              continue;
            }
            case 11: {
              if (tag !== 88) {
                break;
              }
              message.maxRssMb = reader.uint32();
              continue;
            }
            case 12: {
              if (tag !== 98) {
                break;
              }
              message.subjects.push(SubjectStats.decode(reader, reader.uint32()));
              continue;
            }
            case 13: {
              if (tag !== 106) {
                break;
              }
              message.accounts.push(AccountStats.decode(reader, reader.uint32()));
              continue;
            }
            case 14: {
              if (tag !== 112) {
                break;
              }
              message.released = longToNumber2(reader.uint64());
              continue;
            }
            case 15: {
              if (tag !== 120) {
                break;
              }
              message.reportedRssMb = reader.uint32();
              continue;
            }
            case 16: {
              if (tag !== 128) {
                break;
              }
              message.queuePerSubject = reader.uint32();
              continue;
            }
            case 17: {
              if (tag !== 136) {
                break;
              }
              message.queueHardTotal = reader.uint32();
              continue;
            }
            case 18: {
              if (tag !== 144) {
                break;
              }
              message.draining = reader.bool();
              continue;
            }
            case 19: {
              if (tag !== 152) {
                break;
              }
              message.reservationsOpen = longToNumber2(reader.uint64());
              continue;
            }
            case 20: {
              if (tag !== 160) {
                break;
              }
              message.reservationsUncertain = longToNumber2(reader.uint64());
              continue;
            }
            case 21: {
              if (tag !== 168) {
                break;
              }
              message.authorizeAllowed = longToNumber2(reader.uint64());
              continue;
            }
            case 22: {
              if (tag !== 176) {
                break;
              }
              message.authorizeDenied = longToNumber2(reader.uint64());
              continue;
            }
            case 23: {
              if (tag !== 184) {
                break;
              }
              message.authorizeDeferred = longToNumber2(reader.uint64());
              continue;
            }
            case 24: {
              if (tag !== 192) {
                break;
              }
              message.settled = longToNumber2(reader.uint64());
              continue;
            }
            case 25: {
              if (tag !== 200) {
                break;
              }
              message.perSubject = reader.uint32();
              continue;
            }
            case 26: {
              if (tag !== 210) {
                break;
              }
              message.mode = reader.string();
              continue;
            }
            case 27: {
              if (tag !== 216) {
                break;
              }
              message.shadowQueued = longToNumber2(reader.uint64());
              continue;
            }
            case 28: {
              if (tag !== 224) {
                break;
              }
              message.shadowBusy = longToNumber2(reader.uint64());
              continue;
            }
            case 29: {
              if (tag !== 232) {
                break;
              }
              message.shadowQueueFull = longToNumber2(reader.uint64());
              continue;
            }
            case 30: {
              if (tag !== 240) {
                break;
              }
              message.shadowMemoryPressure = longToNumber2(reader.uint64());
              continue;
            }
            case 31: {
              if (tag !== 248) {
                break;
              }
              message.holdAvgMs = reader.uint32();
              continue;
            }
            case 32: {
              if (tag !== 256) {
                break;
              }
              message.outcomeOk = longToNumber2(reader.uint64());
              continue;
            }
            case 33: {
              if (tag !== 264) {
                break;
              }
              message.outcomeRateLimited = longToNumber2(reader.uint64());
              continue;
            }
            case 34: {
              if (tag !== 272) {
                break;
              }
              message.outcomeOverloaded = longToNumber2(reader.uint64());
              continue;
            }
            case 35: {
              if (tag !== 280) {
                break;
              }
              message.outcomeFailed = longToNumber2(reader.uint64());
              continue;
            }
            case 36: {
              if (tag !== 288) {
                break;
              }
              message.latencySumMs = longToNumber2(reader.uint64());
              continue;
            }
            case 37: {
              if (tag !== 296) {
                break;
              }
              message.latencyCount = longToNumber2(reader.uint64());
              continue;
            }
            case 38: {
              if (tag !== 304) {
                break;
              }
              message.accountsCapped = reader.bool();
              continue;
            }
            case 39: {
              if (tag !== 312) {
                break;
              }
              message.reclaimed = longToNumber2(reader.uint64());
              continue;
            }
            case 40: {
              if (tag !== 320) {
                break;
              }
              message.learningLeftMs = reader.uint32();
              continue;
            }
            case 41: {
              if (tag !== 328) {
                break;
              }
              message.stateLosses = longToNumber2(reader.uint64());
              continue;
            }
            case 42: {
              if (tag !== 336) {
                break;
              }
              message.lastStateLossUnixMs = longToNumber2(reader.uint64());
              continue;
            }
            case 43: {
              if (tag !== 344) {
                break;
              }
              message.superseded = longToNumber2(reader.uint64());
              continue;
            }
            case 44: {
              if (tag !== 352) {
                break;
              }
              message.keyRefused = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return Stats.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseStats();
      message.total = object.total ?? 0;
      message.queueTotal = object.queueTotal ?? 0;
      message.inFlight = object.inFlight ?? 0;
      message.queued = object.queued ?? 0;
      message.admitted = object.admitted ?? 0;
      message.rejected = object.rejected ?? 0;
      message.shed = object.shed ?? 0;
      message.cancelled = object.cancelled ?? 0;
      message.expired = object.expired ?? 0;
      message.parked = object.parked ?? 0;
      message.maxRssMb = object.maxRssMb ?? 0;
      message.subjects = object.subjects?.map((e) => SubjectStats.fromPartial(e)) || [];
      message.accounts = object.accounts?.map((e) => AccountStats.fromPartial(e)) || [];
      message.released = object.released ?? 0;
      message.reportedRssMb = object.reportedRssMb ?? 0;
      message.queuePerSubject = object.queuePerSubject ?? 0;
      message.queueHardTotal = object.queueHardTotal ?? 0;
      message.draining = object.draining ?? false;
      message.reservationsOpen = object.reservationsOpen ?? 0;
      message.reservationsUncertain = object.reservationsUncertain ?? 0;
      message.authorizeAllowed = object.authorizeAllowed ?? 0;
      message.authorizeDenied = object.authorizeDenied ?? 0;
      message.authorizeDeferred = object.authorizeDeferred ?? 0;
      message.settled = object.settled ?? 0;
      message.perSubject = object.perSubject ?? 0;
      message.mode = object.mode ?? "";
      message.shadowQueued = object.shadowQueued ?? 0;
      message.shadowBusy = object.shadowBusy ?? 0;
      message.shadowQueueFull = object.shadowQueueFull ?? 0;
      message.shadowMemoryPressure = object.shadowMemoryPressure ?? 0;
      message.holdAvgMs = object.holdAvgMs ?? 0;
      message.outcomeOk = object.outcomeOk ?? 0;
      message.outcomeRateLimited = object.outcomeRateLimited ?? 0;
      message.outcomeOverloaded = object.outcomeOverloaded ?? 0;
      message.outcomeFailed = object.outcomeFailed ?? 0;
      message.latencySumMs = object.latencySumMs ?? 0;
      message.latencyCount = object.latencyCount ?? 0;
      message.accountsCapped = object.accountsCapped ?? false;
      message.reclaimed = object.reclaimed ?? 0;
      message.learningLeftMs = object.learningLeftMs ?? 0;
      message.stateLosses = object.stateLosses ?? 0;
      message.lastStateLossUnixMs = object.lastStateLossUnixMs ?? 0;
      message.superseded = object.superseded ?? 0;
      message.keyRefused = object.keyRefused ?? 0;
      return message;
    }
  };
  function createBaseReclaimRequest() {
    return {
      ticketId: "",
      hostId: "",
      runId: "",
      subject: "",
      accountId: "",
      instanceId: "",
      grant: 0,
      priority: 0,
      key: "",
      keyPolicy: 0
    };
  }
  var ReclaimRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.hostId !== "") {
        writer.uint32(18).string(message.hostId);
      }
      if (message.runId !== "") {
        writer.uint32(26).string(message.runId);
      }
      if (message.subject !== "") {
        writer.uint32(34).string(message.subject);
      }
      if (message.accountId !== "") {
        writer.uint32(42).string(message.accountId);
      }
      if (message.instanceId !== "") {
        writer.uint32(50).string(message.instanceId);
      }
      if (message.grant !== 0) {
        writer.uint32(56).uint64(message.grant);
      }
      if (message.priority !== 0) {
        writer.uint32(64).uint32(message.priority);
      }
      if (message.key !== "") {
        writer.uint32(74).string(message.key);
      }
      if (message.keyPolicy !== 0) {
        writer.uint32(80).int32(message.keyPolicy);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseReclaimRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.instanceId = reader.string();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.priority = reader.uint32();
              continue;
            }
            case 9: {
              if (tag !== 74) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 10: {
              if (tag !== 80) {
                break;
              }
              message.keyPolicy = reader.int32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ReclaimRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseReclaimRequest();
      message.ticketId = object.ticketId ?? "";
      message.hostId = object.hostId ?? "";
      message.runId = object.runId ?? "";
      message.subject = object.subject ?? "";
      message.accountId = object.accountId ?? "";
      message.instanceId = object.instanceId ?? "";
      message.grant = object.grant ?? 0;
      message.priority = object.priority ?? 0;
      message.key = object.key ?? "";
      message.keyPolicy = object.keyPolicy ?? 0;
      return message;
    }
  };
  function createBaseReclaimResponse() {
    return { state: 0, leaseTtlMs: 0, grant: 0, reclaimed: false };
  }
  var ReclaimResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.state !== 0) {
        writer.uint32(8).int32(message.state);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(16).uint32(message.leaseTtlMs);
      }
      if (message.grant !== 0) {
        writer.uint32(24).uint64(message.grant);
      }
      if (message.reclaimed !== false) {
        writer.uint32(32).bool(message.reclaimed);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseReclaimResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.leaseTtlMs = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.reclaimed = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ReclaimResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseReclaimResponse();
      message.state = object.state ?? 0;
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      message.grant = object.grant ?? 0;
      message.reclaimed = object.reclaimed ?? false;
      return message;
    }
  };
  function createBaseSubjectStats() {
    return { subject: "", inFlight: 0, queued: 0, cap: 0 };
  }
  var SubjectStats = {
    encode(message, writer = new BinaryWriter()) {
      if (message.subject !== "") {
        writer.uint32(10).string(message.subject);
      }
      if (message.inFlight !== 0) {
        writer.uint32(16).uint32(message.inFlight);
      }
      if (message.queued !== 0) {
        writer.uint32(24).uint32(message.queued);
      }
      if (message.cap !== 0) {
        writer.uint32(32).uint32(message.cap);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSubjectStats();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.inFlight = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.queued = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.cap = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SubjectStats.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSubjectStats();
      message.subject = object.subject ?? "";
      message.inFlight = object.inFlight ?? 0;
      message.queued = object.queued ?? 0;
      message.cap = object.cap ?? 0;
      return message;
    }
  };
  function createBaseAccountStats() {
    return { accountId: "", inFlight: 0, queued: 0, cap: 0, adaptive: false };
  }
  var AccountStats = {
    encode(message, writer = new BinaryWriter()) {
      if (message.accountId !== "") {
        writer.uint32(10).string(message.accountId);
      }
      if (message.inFlight !== 0) {
        writer.uint32(16).uint32(message.inFlight);
      }
      if (message.queued !== 0) {
        writer.uint32(24).uint32(message.queued);
      }
      if (message.cap !== 0) {
        writer.uint32(32).uint32(message.cap);
      }
      if (message.adaptive !== false) {
        writer.uint32(40).bool(message.adaptive);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAccountStats();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.inFlight = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.queued = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.cap = reader.uint32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.adaptive = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AccountStats.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAccountStats();
      message.accountId = object.accountId ?? "";
      message.inFlight = object.inFlight ?? 0;
      message.queued = object.queued ?? 0;
      message.cap = object.cap ?? 0;
      message.adaptive = object.adaptive ?? false;
      return message;
    }
  };
  function createBaseListTicketsRequest() {
    return { hostId: "", limit: 0 };
  }
  var ListTicketsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.limit !== 0) {
        writer.uint32(16).uint32(message.limit);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListTicketsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.limit = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListTicketsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListTicketsRequest();
      message.hostId = object.hostId ?? "";
      message.limit = object.limit ?? 0;
      return message;
    }
  };
  function createBaseListTicketsResponse() {
    return { tickets: [], truncated: false };
  }
  var ListTicketsResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.tickets) {
        TicketInfo.encode(v, writer.uint32(10).fork()).join();
      }
      if (message.truncated !== false) {
        writer.uint32(16).bool(message.truncated);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListTicketsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.tickets.push(TicketInfo.decode(reader, reader.uint32()));
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.truncated = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListTicketsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListTicketsResponse();
      message.tickets = object.tickets?.map((e) => TicketInfo.fromPartial(e)) || [];
      message.truncated = object.truncated ?? false;
      return message;
    }
  };
  function createBaseTicketInfo() {
    return {
      ticketId: "",
      state: 0,
      subject: "",
      accountId: "",
      runId: "",
      instanceId: "",
      grant: 0,
      leaseRemainingMs: 0,
      priority: 0,
      blockedBy: 0,
      inStateMs: 0,
      place: 0,
      etaMs: 0,
      key: "",
      keyPolicy: 0,
      supersededBy: "",
      debounceLeftMs: 0
    };
  }
  var TicketInfo = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      if (message.state !== 0) {
        writer.uint32(16).int32(message.state);
      }
      if (message.subject !== "") {
        writer.uint32(26).string(message.subject);
      }
      if (message.accountId !== "") {
        writer.uint32(34).string(message.accountId);
      }
      if (message.runId !== "") {
        writer.uint32(42).string(message.runId);
      }
      if (message.instanceId !== "") {
        writer.uint32(50).string(message.instanceId);
      }
      if (message.grant !== 0) {
        writer.uint32(56).uint64(message.grant);
      }
      if (message.leaseRemainingMs !== 0) {
        writer.uint32(64).uint32(message.leaseRemainingMs);
      }
      if (message.priority !== 0) {
        writer.uint32(72).uint32(message.priority);
      }
      if (message.blockedBy !== 0) {
        writer.uint32(80).int32(message.blockedBy);
      }
      if (message.inStateMs !== 0) {
        writer.uint32(88).uint64(message.inStateMs);
      }
      if (message.place !== 0) {
        writer.uint32(96).uint32(message.place);
      }
      if (message.etaMs !== 0) {
        writer.uint32(104).uint32(message.etaMs);
      }
      if (message.key !== "") {
        writer.uint32(114).string(message.key);
      }
      if (message.keyPolicy !== 0) {
        writer.uint32(120).int32(message.keyPolicy);
      }
      if (message.supersededBy !== "") {
        writer.uint32(130).string(message.supersededBy);
      }
      if (message.debounceLeftMs !== 0) {
        writer.uint32(136).uint32(message.debounceLeftMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseTicketInfo();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.instanceId = reader.string();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.leaseRemainingMs = reader.uint32();
              continue;
            }
            case 9: {
              if (tag !== 72) {
                break;
              }
              message.priority = reader.uint32();
              continue;
            }
            case 10: {
              if (tag !== 80) {
                break;
              }
              message.blockedBy = reader.int32();
              continue;
            }
            case 11: {
              if (tag !== 88) {
                break;
              }
              message.inStateMs = longToNumber2(reader.uint64());
              continue;
            }
            case 12: {
              if (tag !== 96) {
                break;
              }
              message.place = reader.uint32();
              continue;
            }
            case 13: {
              if (tag !== 104) {
                break;
              }
              message.etaMs = reader.uint32();
              continue;
            }
            case 14: {
              if (tag !== 114) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 15: {
              if (tag !== 120) {
                break;
              }
              message.keyPolicy = reader.int32();
              continue;
            }
            case 16: {
              if (tag !== 130) {
                break;
              }
              message.supersededBy = reader.string();
              continue;
            }
            case 17: {
              if (tag !== 136) {
                break;
              }
              message.debounceLeftMs = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return TicketInfo.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseTicketInfo();
      message.ticketId = object.ticketId ?? "";
      message.state = object.state ?? 0;
      message.subject = object.subject ?? "";
      message.accountId = object.accountId ?? "";
      message.runId = object.runId ?? "";
      message.instanceId = object.instanceId ?? "";
      message.grant = object.grant ?? 0;
      message.leaseRemainingMs = object.leaseRemainingMs ?? 0;
      message.priority = object.priority ?? 0;
      message.blockedBy = object.blockedBy ?? 0;
      message.inStateMs = object.inStateMs ?? 0;
      message.place = object.place ?? 0;
      message.etaMs = object.etaMs ?? 0;
      message.key = object.key ?? "";
      message.keyPolicy = object.keyPolicy ?? 0;
      message.supersededBy = object.supersededBy ?? "";
      message.debounceLeftMs = object.debounceLeftMs ?? 0;
      return message;
    }
  };
  function createBaseDrainRequest() {
    return {};
  }
  var DrainRequest = {
    encode(_, writer = new BinaryWriter()) {
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseDrainRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return DrainRequest.fromPartial(base ?? {});
    },
    fromPartial(_) {
      const message = createBaseDrainRequest();
      return message;
    }
  };
  function createBaseDrainResponse() {
    return { started: false };
  }
  var DrainResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.started !== false) {
        writer.uint32(8).bool(message.started);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseDrainResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.started = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return DrainResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseDrainResponse();
      message.started = object.started ?? false;
      return message;
    }
  };
  function createBaseAuthAttemptRequest() {
    return { endpoint: "", identity: "", peek: false, declared: void 0 };
  }
  var AuthAttemptRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.endpoint !== "") {
        writer.uint32(10).string(message.endpoint);
      }
      if (message.identity !== "") {
        writer.uint32(18).string(message.identity);
      }
      if (message.peek !== false) {
        writer.uint32(24).bool(message.peek);
      }
      if (message.declared !== void 0) {
        AuthBucket.encode(message.declared, writer.uint32(34).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthAttemptRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.endpoint = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.identity = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.peek = reader.bool();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.declared = AuthBucket.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthAttemptRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthAttemptRequest();
      message.endpoint = object.endpoint ?? "";
      message.identity = object.identity ?? "";
      message.peek = object.peek ?? false;
      message.declared = object.declared !== void 0 && object.declared !== null ? AuthBucket.fromPartial(object.declared) : void 0;
      return message;
    }
  };
  function createBaseAuthBucket() {
    return { maxAttempts: 0, windowMs: 0, lockoutMs: 0 };
  }
  var AuthBucket = {
    encode(message, writer = new BinaryWriter()) {
      if (message.maxAttempts !== 0) {
        writer.uint32(8).uint32(message.maxAttempts);
      }
      if (message.windowMs !== 0) {
        writer.uint32(16).uint64(message.windowMs);
      }
      if (message.lockoutMs !== 0) {
        writer.uint32(24).uint64(message.lockoutMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthBucket();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.maxAttempts = reader.uint32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.windowMs = longToNumber2(reader.uint64());
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.lockoutMs = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthBucket.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthBucket();
      message.maxAttempts = object.maxAttempts ?? 0;
      message.windowMs = object.windowMs ?? 0;
      message.lockoutMs = object.lockoutMs ?? 0;
      return message;
    }
  };
  function createBaseAuthAttemptResponse() {
    return {
      allowed: false,
      remaining: 0,
      retryAfterMs: 0,
      locked: false,
      degraded: false,
      reason: "",
      bucket: void 0
    };
  }
  var AuthAttemptResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.allowed !== false) {
        writer.uint32(8).bool(message.allowed);
      }
      if (message.remaining !== 0) {
        writer.uint32(16).uint32(message.remaining);
      }
      if (message.retryAfterMs !== 0) {
        writer.uint32(24).uint32(message.retryAfterMs);
      }
      if (message.locked !== false) {
        writer.uint32(32).bool(message.locked);
      }
      if (message.degraded !== false) {
        writer.uint32(40).bool(message.degraded);
      }
      if (message.reason !== "") {
        writer.uint32(50).string(message.reason);
      }
      if (message.bucket !== void 0) {
        AuthBucket.encode(message.bucket, writer.uint32(58).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthAttemptResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.allowed = reader.bool();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.remaining = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.retryAfterMs = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.locked = reader.bool();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.degraded = reader.bool();
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.reason = reader.string();
              continue;
            }
            case 7: {
              if (tag !== 58) {
                break;
              }
              message.bucket = AuthBucket.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthAttemptResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthAttemptResponse();
      message.allowed = object.allowed ?? false;
      message.remaining = object.remaining ?? 0;
      message.retryAfterMs = object.retryAfterMs ?? 0;
      message.locked = object.locked ?? false;
      message.degraded = object.degraded ?? false;
      message.reason = object.reason ?? "";
      message.bucket = object.bucket !== void 0 && object.bucket !== null ? AuthBucket.fromPartial(object.bucket) : void 0;
      return message;
    }
  };
  function createBaseAuthResetRequest() {
    return { endpoint: "", identity: "", declared: void 0 };
  }
  var AuthResetRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.endpoint !== "") {
        writer.uint32(10).string(message.endpoint);
      }
      if (message.identity !== "") {
        writer.uint32(18).string(message.identity);
      }
      if (message.declared !== void 0) {
        AuthBucket.encode(message.declared, writer.uint32(26).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthResetRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.endpoint = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.identity = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.declared = AuthBucket.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthResetRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthResetRequest();
      message.endpoint = object.endpoint ?? "";
      message.identity = object.identity ?? "";
      message.declared = object.declared !== void 0 && object.declared !== null ? AuthBucket.fromPartial(object.declared) : void 0;
      return message;
    }
  };
  function createBaseAuthResetResponse() {
    return { cleared: false };
  }
  var AuthResetResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.cleared !== false) {
        writer.uint32(8).bool(message.cleared);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthResetResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.cleared = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthResetResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthResetResponse();
      message.cleared = object.cleared ?? false;
      return message;
    }
  };
  function createBaseUnlockAuthRequest() {
    return { endpoint: "", identity: "" };
  }
  var UnlockAuthRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.endpoint !== "") {
        writer.uint32(10).string(message.endpoint);
      }
      if (message.identity !== "") {
        writer.uint32(18).string(message.identity);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseUnlockAuthRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.endpoint = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.identity = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return UnlockAuthRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseUnlockAuthRequest();
      message.endpoint = object.endpoint ?? "";
      message.identity = object.identity ?? "";
      return message;
    }
  };
  function createBaseUnlockAuthResponse() {
    return { wasLocked: false, cleared: false };
  }
  var UnlockAuthResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.wasLocked !== false) {
        writer.uint32(8).bool(message.wasLocked);
      }
      if (message.cleared !== false) {
        writer.uint32(16).bool(message.cleared);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseUnlockAuthResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.wasLocked = reader.bool();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.cleared = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return UnlockAuthResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseUnlockAuthResponse();
      message.wasLocked = object.wasLocked ?? false;
      message.cleared = object.cleared ?? false;
      return message;
    }
  };
  function createBaseAuthorizeRequest() {
    return {
      hostId: "",
      runId: "",
      step: 0,
      subject: "",
      accountId: "",
      model: "",
      requestedOutputTokens: 0,
      estimatedInputTokens: 0,
      estimatedCostUsd: 0
    };
  }
  var AuthorizeRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.runId !== "") {
        writer.uint32(18).string(message.runId);
      }
      if (message.step !== 0) {
        writer.uint32(24).uint32(message.step);
      }
      if (message.subject !== "") {
        writer.uint32(34).string(message.subject);
      }
      if (message.accountId !== "") {
        writer.uint32(42).string(message.accountId);
      }
      if (message.model !== "") {
        writer.uint32(50).string(message.model);
      }
      if (message.requestedOutputTokens !== 0) {
        writer.uint32(56).int64(message.requestedOutputTokens);
      }
      if (message.estimatedInputTokens !== 0) {
        writer.uint32(64).int64(message.estimatedInputTokens);
      }
      if (message.estimatedCostUsd !== 0) {
        writer.uint32(73).double(message.estimatedCostUsd);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthorizeRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.step = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.model = reader.string();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.requestedOutputTokens = longToNumber2(reader.int64());
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.estimatedInputTokens = longToNumber2(reader.int64());
              continue;
            }
            case 9: {
              if (tag !== 73) {
                break;
              }
              message.estimatedCostUsd = reader.double();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthorizeRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthorizeRequest();
      message.hostId = object.hostId ?? "";
      message.runId = object.runId ?? "";
      message.step = object.step ?? 0;
      message.subject = object.subject ?? "";
      message.accountId = object.accountId ?? "";
      message.model = object.model ?? "";
      message.requestedOutputTokens = object.requestedOutputTokens ?? 0;
      message.estimatedInputTokens = object.estimatedInputTokens ?? 0;
      message.estimatedCostUsd = object.estimatedCostUsd ?? 0;
      return message;
    }
  };
  function createBaseAuthorizeResponse() {
    return {
      decision: 0,
      reason: "",
      grantedOutputTokens: 0,
      replay: false,
      remainingTokens: void 0,
      remainingCostUsd: void 0
    };
  }
  var AuthorizeResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.decision !== 0) {
        writer.uint32(8).int32(message.decision);
      }
      if (message.reason !== "") {
        writer.uint32(18).string(message.reason);
      }
      if (message.grantedOutputTokens !== 0) {
        writer.uint32(24).uint64(message.grantedOutputTokens);
      }
      if (message.replay !== false) {
        writer.uint32(32).bool(message.replay);
      }
      if (message.remainingTokens !== void 0) {
        writer.uint32(40).uint64(message.remainingTokens);
      }
      if (message.remainingCostUsd !== void 0) {
        writer.uint32(49).double(message.remainingCostUsd);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAuthorizeResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.decision = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.reason = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.grantedOutputTokens = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.replay = reader.bool();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.remainingTokens = longToNumber2(reader.uint64());
              continue;
            }
            case 6: {
              if (tag !== 49) {
                break;
              }
              message.remainingCostUsd = reader.double();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AuthorizeResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAuthorizeResponse();
      message.decision = object.decision ?? 0;
      message.reason = object.reason ?? "";
      message.grantedOutputTokens = object.grantedOutputTokens ?? 0;
      message.replay = object.replay ?? false;
      message.remainingTokens = object.remainingTokens ?? void 0;
      message.remainingCostUsd = object.remainingCostUsd ?? void 0;
      return message;
    }
  };
  function createBaseUsage() {
    return { inputTokens: 0, outputTokens: 0, costUsd: 0, coverage: 0 };
  }
  var Usage = {
    encode(message, writer = new BinaryWriter()) {
      if (message.inputTokens !== 0) {
        writer.uint32(8).int64(message.inputTokens);
      }
      if (message.outputTokens !== 0) {
        writer.uint32(16).int64(message.outputTokens);
      }
      if (message.costUsd !== 0) {
        writer.uint32(25).double(message.costUsd);
      }
      if (message.coverage !== 0) {
        writer.uint32(32).int32(message.coverage);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseUsage();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.inputTokens = longToNumber2(reader.int64());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.outputTokens = longToNumber2(reader.int64());
              continue;
            }
            case 3: {
              if (tag !== 25) {
                break;
              }
              message.costUsd = reader.double();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.coverage = reader.int32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return Usage.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseUsage();
      message.inputTokens = object.inputTokens ?? 0;
      message.outputTokens = object.outputTokens ?? 0;
      message.costUsd = object.costUsd ?? 0;
      message.coverage = object.coverage ?? 0;
      return message;
    }
  };
  function createBaseSettleRequest() {
    return { hostId: "", runId: "", step: 0, usage: void 0 };
  }
  var SettleRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.runId !== "") {
        writer.uint32(18).string(message.runId);
      }
      if (message.step !== 0) {
        writer.uint32(24).uint32(message.step);
      }
      if (message.usage !== void 0) {
        Usage.encode(message.usage, writer.uint32(34).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSettleRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.step = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.usage = Usage.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SettleRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSettleRequest();
      message.hostId = object.hostId ?? "";
      message.runId = object.runId ?? "";
      message.step = object.step ?? 0;
      message.usage = object.usage !== void 0 && object.usage !== null ? Usage.fromPartial(object.usage) : void 0;
      return message;
    }
  };
  function createBaseSettleResponse() {
    return { replay: false };
  }
  var SettleResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.replay !== false) {
        writer.uint32(8).bool(message.replay);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSettleResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.replay = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SettleResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSettleResponse();
      message.replay = object.replay ?? false;
      return message;
    }
  };
  function createBaseListReservationsRequest() {
    return { hostId: "", limit: 0 };
  }
  var ListReservationsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.limit !== 0) {
        writer.uint32(16).uint32(message.limit);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListReservationsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.limit = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListReservationsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListReservationsRequest();
      message.hostId = object.hostId ?? "";
      message.limit = object.limit ?? 0;
      return message;
    }
  };
  function createBaseListReservationsResponse() {
    return { reservations: [], truncated: false };
  }
  var ListReservationsResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.reservations) {
        ReservationInfo.encode(v, writer.uint32(10).fork()).join();
      }
      if (message.truncated !== false) {
        writer.uint32(16).bool(message.truncated);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListReservationsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.reservations.push(ReservationInfo.decode(reader, reader.uint32()));
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.truncated = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListReservationsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListReservationsResponse();
      message.reservations = object.reservations?.map((e) => ReservationInfo.fromPartial(e)) || [];
      message.truncated = object.truncated ?? false;
      return message;
    }
  };
  function createBaseReservationInfo() {
    return {
      runId: "",
      step: 0,
      subject: "",
      accountId: "",
      model: "",
      state: 0,
      reservedTokens: 0,
      reservedCostUsd: 0,
      ageMs: 0
    };
  }
  var ReservationInfo = {
    encode(message, writer = new BinaryWriter()) {
      if (message.runId !== "") {
        writer.uint32(10).string(message.runId);
      }
      if (message.step !== 0) {
        writer.uint32(16).uint32(message.step);
      }
      if (message.subject !== "") {
        writer.uint32(26).string(message.subject);
      }
      if (message.accountId !== "") {
        writer.uint32(34).string(message.accountId);
      }
      if (message.model !== "") {
        writer.uint32(42).string(message.model);
      }
      if (message.state !== 0) {
        writer.uint32(48).int32(message.state);
      }
      if (message.reservedTokens !== 0) {
        writer.uint32(56).uint64(message.reservedTokens);
      }
      if (message.reservedCostUsd !== 0) {
        writer.uint32(65).double(message.reservedCostUsd);
      }
      if (message.ageMs !== 0) {
        writer.uint32(72).uint64(message.ageMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseReservationInfo();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.step = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.accountId = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.model = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.reservedTokens = longToNumber2(reader.uint64());
              continue;
            }
            case 8: {
              if (tag !== 65) {
                break;
              }
              message.reservedCostUsd = reader.double();
              continue;
            }
            case 9: {
              if (tag !== 72) {
                break;
              }
              message.ageMs = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ReservationInfo.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseReservationInfo();
      message.runId = object.runId ?? "";
      message.step = object.step ?? 0;
      message.subject = object.subject ?? "";
      message.accountId = object.accountId ?? "";
      message.model = object.model ?? "";
      message.state = object.state ?? 0;
      message.reservedTokens = object.reservedTokens ?? 0;
      message.reservedCostUsd = object.reservedCostUsd ?? 0;
      message.ageMs = object.ageMs ?? 0;
      return message;
    }
  };
  function createBaseResolveReservationRequest() {
    return { hostId: "", runId: "", step: 0, resolution: 0 };
  }
  var ResolveReservationRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.runId !== "") {
        writer.uint32(18).string(message.runId);
      }
      if (message.step !== 0) {
        writer.uint32(24).uint32(message.step);
      }
      if (message.resolution !== 0) {
        writer.uint32(32).int32(message.resolution);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseResolveReservationRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.runId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.step = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.resolution = reader.int32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ResolveReservationRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseResolveReservationRequest();
      message.hostId = object.hostId ?? "";
      message.runId = object.runId ?? "";
      message.step = object.step ?? 0;
      message.resolution = object.resolution ?? 0;
      return message;
    }
  };
  function createBaseResolveReservationResponse() {
    return {};
  }
  var ResolveReservationResponse = {
    encode(_, writer = new BinaryWriter()) {
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseResolveReservationResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ResolveReservationResponse.fromPartial(base ?? {});
    },
    fromPartial(_) {
      const message = createBaseResolveReservationResponse();
      return message;
    }
  };
  function createBaseParkRequest() {
    return { ticketId: "" };
  }
  var ParkRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseParkRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ParkRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseParkRequest();
      message.ticketId = object.ticketId ?? "";
      return message;
    }
  };
  function createBaseParkResponse() {
    return { state: 0, leaseTtlMs: 0 };
  }
  var ParkResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.state !== 0) {
        writer.uint32(8).int32(message.state);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(16).uint32(message.leaseTtlMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseParkResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.leaseTtlMs = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ParkResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseParkResponse();
      message.state = object.state ?? 0;
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      return message;
    }
  };
  function createBaseUnparkRequest() {
    return { ticketId: "" };
  }
  var UnparkRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.ticketId !== "") {
        writer.uint32(10).string(message.ticketId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseUnparkRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.ticketId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return UnparkRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseUnparkRequest();
      message.ticketId = object.ticketId ?? "";
      return message;
    }
  };
  function createBaseUnparkResponse() {
    return { state: 0, position: 0, grant: 0, leaseTtlMs: 0, etaMs: 0 };
  }
  var UnparkResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.state !== 0) {
        writer.uint32(8).int32(message.state);
      }
      if (message.position !== 0) {
        writer.uint32(16).uint32(message.position);
      }
      if (message.grant !== 0) {
        writer.uint32(24).uint64(message.grant);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(32).uint32(message.leaseTtlMs);
      }
      if (message.etaMs !== 0) {
        writer.uint32(40).uint32(message.etaMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseUnparkResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.state = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.position = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.grant = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.leaseTtlMs = reader.uint32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.etaMs = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return UnparkResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseUnparkResponse();
      message.state = object.state ?? 0;
      message.position = object.position ?? 0;
      message.grant = object.grant ?? 0;
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      message.etaMs = object.etaMs ?? 0;
      return message;
    }
  };
  function createBaseHostLimits() {
    return {
      total: 0,
      perSubject: 0,
      perAccount: void 0,
      subjects: {},
      accounts: {},
      queue: void 0,
      overflowPolicy: "",
      leaseTtlMs: 0,
      retentionMs: 0,
      maxRetained: 0,
      weights: {},
      priorityAgingMs: 0,
      mode: "",
      adaptiveAccounts: {},
      adaptive: void 0
    };
  }
  var HostLimits = {
    encode(message, writer = new BinaryWriter()) {
      if (message.total !== 0) {
        writer.uint32(8).uint32(message.total);
      }
      if (message.perSubject !== 0) {
        writer.uint32(16).uint32(message.perSubject);
      }
      if (message.perAccount !== void 0) {
        writer.uint32(24).uint32(message.perAccount);
      }
      globalThis.Object.entries(message.subjects).forEach(([key, value]) => {
        HostLimits_SubjectsEntry.encode({ key, value }, writer.uint32(34).fork()).join();
      });
      globalThis.Object.entries(message.accounts).forEach(([key, value]) => {
        HostLimits_AccountsEntry.encode({ key, value }, writer.uint32(42).fork()).join();
      });
      if (message.queue !== void 0) {
        QueueLimits.encode(message.queue, writer.uint32(50).fork()).join();
      }
      if (message.overflowPolicy !== "") {
        writer.uint32(58).string(message.overflowPolicy);
      }
      if (message.leaseTtlMs !== 0) {
        writer.uint32(64).uint64(message.leaseTtlMs);
      }
      if (message.retentionMs !== 0) {
        writer.uint32(72).uint64(message.retentionMs);
      }
      if (message.maxRetained !== 0) {
        writer.uint32(80).uint32(message.maxRetained);
      }
      globalThis.Object.entries(message.weights).forEach(([key, value]) => {
        HostLimits_WeightsEntry.encode({ key, value }, writer.uint32(90).fork()).join();
      });
      if (message.priorityAgingMs !== 0) {
        writer.uint32(96).uint64(message.priorityAgingMs);
      }
      if (message.mode !== "") {
        writer.uint32(106).string(message.mode);
      }
      globalThis.Object.entries(message.adaptiveAccounts).forEach(([key, value]) => {
        HostLimits_AdaptiveAccountsEntry.encode({ key, value }, writer.uint32(114).fork()).join();
      });
      if (message.adaptive !== void 0) {
        AdaptiveLimits.encode(message.adaptive, writer.uint32(122).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHostLimits();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.total = reader.uint32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.perSubject = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.perAccount = reader.uint32();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              const entry4 = HostLimits_SubjectsEntry.decode(reader, reader.uint32());
              if (entry4.value !== void 0) {
                message.subjects[entry4.key] = entry4.value;
              }
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              const entry5 = HostLimits_AccountsEntry.decode(reader, reader.uint32());
              if (entry5.value !== void 0) {
                message.accounts[entry5.key] = entry5.value;
              }
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.queue = QueueLimits.decode(reader, reader.uint32());
              continue;
            }
            case 7: {
              if (tag !== 58) {
                break;
              }
              message.overflowPolicy = reader.string();
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.leaseTtlMs = longToNumber2(reader.uint64());
              continue;
            }
            case 9: {
              if (tag !== 72) {
                break;
              }
              message.retentionMs = longToNumber2(reader.uint64());
              continue;
            }
            case 10: {
              if (tag !== 80) {
                break;
              }
              message.maxRetained = reader.uint32();
              continue;
            }
            case 11: {
              if (tag !== 90) {
                break;
              }
              const entry11 = HostLimits_WeightsEntry.decode(reader, reader.uint32());
              if (entry11.value !== void 0) {
                message.weights[entry11.key] = entry11.value;
              }
              continue;
            }
            case 12: {
              if (tag !== 96) {
                break;
              }
              message.priorityAgingMs = longToNumber2(reader.uint64());
              continue;
            }
            case 13: {
              if (tag !== 106) {
                break;
              }
              message.mode = reader.string();
              continue;
            }
            case 14: {
              if (tag !== 114) {
                break;
              }
              const entry14 = HostLimits_AdaptiveAccountsEntry.decode(reader, reader.uint32());
              if (entry14.value !== void 0) {
                message.adaptiveAccounts[entry14.key] = entry14.value;
              }
              continue;
            }
            case 15: {
              if (tag !== 122) {
                break;
              }
              message.adaptive = AdaptiveLimits.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HostLimits.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHostLimits();
      message.total = object.total ?? 0;
      message.perSubject = object.perSubject ?? 0;
      message.perAccount = object.perAccount ?? void 0;
      message.subjects = globalThis.Object.entries(object.subjects ?? {}).reduce(
        (acc, [key, value]) => {
          if (value !== void 0) {
            acc[key] = globalThis.Number(value);
          }
          return acc;
        },
        {}
      );
      message.accounts = globalThis.Object.entries(object.accounts ?? {}).reduce(
        (acc, [key, value]) => {
          if (value !== void 0) {
            acc[key] = globalThis.Number(value);
          }
          return acc;
        },
        {}
      );
      message.queue = object.queue !== void 0 && object.queue !== null ? QueueLimits.fromPartial(object.queue) : void 0;
      message.overflowPolicy = object.overflowPolicy ?? "";
      message.leaseTtlMs = object.leaseTtlMs ?? 0;
      message.retentionMs = object.retentionMs ?? 0;
      message.maxRetained = object.maxRetained ?? 0;
      message.weights = globalThis.Object.entries(object.weights ?? {}).reduce(
        (acc, [key, value]) => {
          if (value !== void 0) {
            acc[key] = globalThis.Number(value);
          }
          return acc;
        },
        {}
      );
      message.priorityAgingMs = object.priorityAgingMs ?? 0;
      message.mode = object.mode ?? "";
      message.adaptiveAccounts = globalThis.Object.entries(object.adaptiveAccounts ?? {}).reduce((acc, [key, value]) => {
        if (value !== void 0) {
          acc[key] = AdaptiveLimits.fromPartial(value);
        }
        return acc;
      }, {});
      message.adaptive = object.adaptive !== void 0 && object.adaptive !== null ? AdaptiveLimits.fromPartial(object.adaptive) : void 0;
      return message;
    }
  };
  function createBaseHostLimits_SubjectsEntry() {
    return { key: "", value: 0 };
  }
  var HostLimits_SubjectsEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== 0) {
        writer.uint32(16).uint32(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHostLimits_SubjectsEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.value = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HostLimits_SubjectsEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHostLimits_SubjectsEntry();
      message.key = object.key ?? "";
      message.value = object.value ?? 0;
      return message;
    }
  };
  function createBaseHostLimits_AccountsEntry() {
    return { key: "", value: 0 };
  }
  var HostLimits_AccountsEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== 0) {
        writer.uint32(16).uint32(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHostLimits_AccountsEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.value = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HostLimits_AccountsEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHostLimits_AccountsEntry();
      message.key = object.key ?? "";
      message.value = object.value ?? 0;
      return message;
    }
  };
  function createBaseHostLimits_WeightsEntry() {
    return { key: "", value: 0 };
  }
  var HostLimits_WeightsEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== 0) {
        writer.uint32(16).uint32(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHostLimits_WeightsEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.value = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HostLimits_WeightsEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHostLimits_WeightsEntry();
      message.key = object.key ?? "";
      message.value = object.value ?? 0;
      return message;
    }
  };
  function createBaseHostLimits_AdaptiveAccountsEntry() {
    return { key: "", value: void 0 };
  }
  var HostLimits_AdaptiveAccountsEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== void 0) {
        AdaptiveLimits.encode(message.value, writer.uint32(18).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHostLimits_AdaptiveAccountsEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.value = AdaptiveLimits.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HostLimits_AdaptiveAccountsEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHostLimits_AdaptiveAccountsEntry();
      message.key = object.key ?? "";
      message.value = object.value !== void 0 && object.value !== null ? AdaptiveLimits.fromPartial(object.value) : void 0;
      return message;
    }
  };
  function createBaseAdaptiveLimits() {
    return { min: 0, max: 0, decrease: 0, increase: 0, cooldownMs: void 0 };
  }
  var AdaptiveLimits = {
    encode(message, writer = new BinaryWriter()) {
      if (message.min !== 0) {
        writer.uint32(8).uint32(message.min);
      }
      if (message.max !== 0) {
        writer.uint32(16).uint32(message.max);
      }
      if (message.decrease !== 0) {
        writer.uint32(25).double(message.decrease);
      }
      if (message.increase !== 0) {
        writer.uint32(32).uint32(message.increase);
      }
      if (message.cooldownMs !== void 0) {
        writer.uint32(40).uint64(message.cooldownMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAdaptiveLimits();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.min = reader.uint32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.max = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 25) {
                break;
              }
              message.decrease = reader.double();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.increase = reader.uint32();
              continue;
            }
            case 5: {
              if (tag !== 40) {
                break;
              }
              message.cooldownMs = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return AdaptiveLimits.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAdaptiveLimits();
      message.min = object.min ?? 0;
      message.max = object.max ?? 0;
      message.decrease = object.decrease ?? 0;
      message.increase = object.increase ?? 0;
      message.cooldownMs = object.cooldownMs ?? void 0;
      return message;
    }
  };
  function createBaseQueueLimits() {
    return { total: 0, perSubject: 0, hardTotal: 0 };
  }
  var QueueLimits = {
    encode(message, writer = new BinaryWriter()) {
      if (message.total !== 0) {
        writer.uint32(8).uint32(message.total);
      }
      if (message.perSubject !== 0) {
        writer.uint32(16).uint32(message.perSubject);
      }
      if (message.hardTotal !== 0) {
        writer.uint32(24).uint32(message.hardTotal);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseQueueLimits();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.total = reader.uint32();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.perSubject = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.hardTotal = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return QueueLimits.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseQueueLimits();
      message.total = object.total ?? 0;
      message.perSubject = object.perSubject ?? 0;
      message.hardTotal = object.hardTotal ?? 0;
      return message;
    }
  };
  function createBaseListHostsRequest() {
    return {};
  }
  var ListHostsRequest = {
    encode(_, writer = new BinaryWriter()) {
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListHostsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListHostsRequest.fromPartial(base ?? {});
    },
    fromPartial(_) {
      const message = createBaseListHostsRequest();
      return message;
    }
  };
  function createBaseListHostsResponse() {
    return { hostIds: [], draining: false, storeProblem: "", note: "" };
  }
  var ListHostsResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.hostIds) {
        writer.uint32(10).string(v);
      }
      if (message.draining !== false) {
        writer.uint32(16).bool(message.draining);
      }
      if (message.storeProblem !== "") {
        writer.uint32(26).string(message.storeProblem);
      }
      if (message.note !== "") {
        writer.uint32(34).string(message.note);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListHostsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostIds.push(reader.string());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.draining = reader.bool();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.storeProblem = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.note = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListHostsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListHostsResponse();
      message.hostIds = object.hostIds?.map((e) => e) || [];
      message.draining = object.draining ?? false;
      message.storeProblem = object.storeProblem ?? "";
      message.note = object.note ?? "";
      return message;
    }
  };
  function createBaseGetLimitsRequest() {
    return { hostId: "", orDefaults: false };
  }
  var GetLimitsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.orDefaults !== false) {
        writer.uint32(16).bool(message.orDefaults);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetLimitsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.orDefaults = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetLimitsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetLimitsRequest();
      message.hostId = object.hostId ?? "";
      message.orDefaults = object.orDefaults ?? false;
      return message;
    }
  };
  function createBaseGetLimitsResponse() {
    return { limits: void 0, source: 0, revision: 0, adaptiveCaps: {} };
  }
  var GetLimitsResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.limits !== void 0) {
        HostLimits.encode(message.limits, writer.uint32(10).fork()).join();
      }
      if (message.source !== 0) {
        writer.uint32(16).int32(message.source);
      }
      if (message.revision !== 0) {
        writer.uint32(24).uint64(message.revision);
      }
      globalThis.Object.entries(message.adaptiveCaps).forEach(([key, value]) => {
        GetLimitsResponse_AdaptiveCapsEntry.encode({ key, value }, writer.uint32(34).fork()).join();
      });
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetLimitsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.limits = HostLimits.decode(reader, reader.uint32());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.source = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.revision = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              const entry4 = GetLimitsResponse_AdaptiveCapsEntry.decode(reader, reader.uint32());
              if (entry4.value !== void 0) {
                message.adaptiveCaps[entry4.key] = entry4.value;
              }
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetLimitsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetLimitsResponse();
      message.limits = object.limits !== void 0 && object.limits !== null ? HostLimits.fromPartial(object.limits) : void 0;
      message.source = object.source ?? 0;
      message.revision = object.revision ?? 0;
      message.adaptiveCaps = globalThis.Object.entries(object.adaptiveCaps ?? {}).reduce(
        (acc, [key, value]) => {
          if (value !== void 0) {
            acc[key] = globalThis.Number(value);
          }
          return acc;
        },
        {}
      );
      return message;
    }
  };
  function createBaseGetLimitsResponse_AdaptiveCapsEntry() {
    return { key: "", value: 0 };
  }
  var GetLimitsResponse_AdaptiveCapsEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== 0) {
        writer.uint32(16).uint32(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetLimitsResponse_AdaptiveCapsEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.value = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetLimitsResponse_AdaptiveCapsEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetLimitsResponse_AdaptiveCapsEntry();
      message.key = object.key ?? "";
      message.value = object.value ?? 0;
      return message;
    }
  };
  function createBaseSetLimitsRequest() {
    return { hostId: "", limits: void 0, expectedRevision: 0 };
  }
  var SetLimitsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.limits !== void 0) {
        HostLimits.encode(message.limits, writer.uint32(18).fork()).join();
      }
      if (message.expectedRevision !== 0) {
        writer.uint32(24).uint64(message.expectedRevision);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSetLimitsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.limits = HostLimits.decode(reader, reader.uint32());
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.expectedRevision = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SetLimitsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSetLimitsRequest();
      message.hostId = object.hostId ?? "";
      message.limits = object.limits !== void 0 && object.limits !== null ? HostLimits.fromPartial(object.limits) : void 0;
      message.expectedRevision = object.expectedRevision ?? 0;
      return message;
    }
  };
  function createBaseSetLimitsResponse() {
    return { limits: void 0, source: 0, revision: 0 };
  }
  var SetLimitsResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.limits !== void 0) {
        HostLimits.encode(message.limits, writer.uint32(10).fork()).join();
      }
      if (message.source !== 0) {
        writer.uint32(16).int32(message.source);
      }
      if (message.revision !== 0) {
        writer.uint32(24).uint64(message.revision);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseSetLimitsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.limits = HostLimits.decode(reader, reader.uint32());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.source = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.revision = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return SetLimitsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseSetLimitsResponse();
      message.limits = object.limits !== void 0 && object.limits !== null ? HostLimits.fromPartial(object.limits) : void 0;
      message.source = object.source ?? 0;
      message.revision = object.revision ?? 0;
      return message;
    }
  };
  function createBaseResetLimitsRequest() {
    return { hostId: "", expectedRevision: 0 };
  }
  var ResetLimitsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      if (message.expectedRevision !== 0) {
        writer.uint32(16).uint64(message.expectedRevision);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseResetLimitsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.expectedRevision = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ResetLimitsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseResetLimitsRequest();
      message.hostId = object.hostId ?? "";
      message.expectedRevision = object.expectedRevision ?? 0;
      return message;
    }
  };
  function createBaseResetLimitsResponse() {
    return { limits: void 0, source: 0, revision: 0 };
  }
  var ResetLimitsResponse = {
    encode(message, writer = new BinaryWriter()) {
      if (message.limits !== void 0) {
        HostLimits.encode(message.limits, writer.uint32(10).fork()).join();
      }
      if (message.source !== 0) {
        writer.uint32(16).int32(message.source);
      }
      if (message.revision !== 0) {
        writer.uint32(24).uint64(message.revision);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseResetLimitsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.limits = HostLimits.decode(reader, reader.uint32());
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.source = reader.int32();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.revision = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ResetLimitsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseResetLimitsResponse();
      message.limits = object.limits !== void 0 && object.limits !== null ? HostLimits.fromPartial(object.limits) : void 0;
      message.source = object.source ?? 0;
      message.revision = object.revision ?? 0;
      return message;
    }
  };
  function createBaseListHttpPoliciesRequest() {
    return { hostId: "" };
  }
  var ListHttpPoliciesRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.hostId !== "") {
        writer.uint32(10).string(message.hostId);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListHttpPoliciesRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListHttpPoliciesRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListHttpPoliciesRequest();
      message.hostId = object.hostId ?? "";
      return message;
    }
  };
  function createBaseHttpPolicyInfo() {
    return {
      name: "",
      hostId: "",
      subject: "",
      account: "",
      priority: "",
      maxWaitMs: 0,
      tokens: "",
      defaultMaxTokens: 0,
      key: "",
      keyPolicy: "",
      debounceMs: 0
    };
  }
  var HttpPolicyInfo = {
    encode(message, writer = new BinaryWriter()) {
      if (message.name !== "") {
        writer.uint32(10).string(message.name);
      }
      if (message.hostId !== "") {
        writer.uint32(18).string(message.hostId);
      }
      if (message.subject !== "") {
        writer.uint32(26).string(message.subject);
      }
      if (message.account !== "") {
        writer.uint32(34).string(message.account);
      }
      if (message.priority !== "") {
        writer.uint32(42).string(message.priority);
      }
      if (message.maxWaitMs !== 0) {
        writer.uint32(48).uint64(message.maxWaitMs);
      }
      if (message.tokens !== "") {
        writer.uint32(58).string(message.tokens);
      }
      if (message.defaultMaxTokens !== 0) {
        writer.uint32(64).uint64(message.defaultMaxTokens);
      }
      if (message.key !== "") {
        writer.uint32(74).string(message.key);
      }
      if (message.keyPolicy !== "") {
        writer.uint32(82).string(message.keyPolicy);
      }
      if (message.debounceMs !== 0) {
        writer.uint32(88).uint64(message.debounceMs);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseHttpPolicyInfo();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.name = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.hostId = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.subject = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.account = reader.string();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.priority = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.maxWaitMs = longToNumber2(reader.uint64());
              continue;
            }
            case 7: {
              if (tag !== 58) {
                break;
              }
              message.tokens = reader.string();
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.defaultMaxTokens = longToNumber2(reader.uint64());
              continue;
            }
            case 9: {
              if (tag !== 74) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 10: {
              if (tag !== 82) {
                break;
              }
              message.keyPolicy = reader.string();
              continue;
            }
            case 11: {
              if (tag !== 88) {
                break;
              }
              message.debounceMs = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return HttpPolicyInfo.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseHttpPolicyInfo();
      message.name = object.name ?? "";
      message.hostId = object.hostId ?? "";
      message.subject = object.subject ?? "";
      message.account = object.account ?? "";
      message.priority = object.priority ?? "";
      message.maxWaitMs = object.maxWaitMs ?? 0;
      message.tokens = object.tokens ?? "";
      message.defaultMaxTokens = object.defaultMaxTokens ?? 0;
      message.key = object.key ?? "";
      message.keyPolicy = object.keyPolicy ?? "";
      message.debounceMs = object.debounceMs ?? 0;
      return message;
    }
  };
  function createBaseListHttpPoliciesResponse() {
    return { policies: [] };
  }
  var ListHttpPoliciesResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.policies) {
        HttpPolicyInfo.encode(v, writer.uint32(10).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseListHttpPoliciesResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.policies.push(HttpPolicyInfo.decode(reader, reader.uint32()));
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ListHttpPoliciesResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseListHttpPoliciesResponse();
      message.policies = object.policies?.map((e) => HttpPolicyInfo.fromPartial(e)) || [];
      return message;
    }
  };
  function createBaseGetRateLimitsRequest() {
    return { domain: "", limit: 0 };
  }
  var GetRateLimitsRequest = {
    encode(message, writer = new BinaryWriter()) {
      if (message.domain !== "") {
        writer.uint32(10).string(message.domain);
      }
      if (message.limit !== 0) {
        writer.uint32(16).uint32(message.limit);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetRateLimitsRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.domain = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.limit = reader.uint32();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetRateLimitsRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetRateLimitsRequest();
      message.domain = object.domain ?? "";
      message.limit = object.limit ?? 0;
      return message;
    }
  };
  function createBaseRateLimitRule() {
    return {
      descriptor: "",
      requestsPerUnit: 0,
      unit: "",
      unlimited: false,
      name: "",
      replaces: [],
      shadowMode: false,
      quotaMode: false
    };
  }
  var RateLimitRule = {
    encode(message, writer = new BinaryWriter()) {
      if (message.descriptor !== "") {
        writer.uint32(10).string(message.descriptor);
      }
      if (message.requestsPerUnit !== 0) {
        writer.uint32(16).uint32(message.requestsPerUnit);
      }
      if (message.unit !== "") {
        writer.uint32(26).string(message.unit);
      }
      if (message.unlimited !== false) {
        writer.uint32(32).bool(message.unlimited);
      }
      if (message.name !== "") {
        writer.uint32(42).string(message.name);
      }
      for (const v of message.replaces) {
        writer.uint32(50).string(v);
      }
      if (message.shadowMode !== false) {
        writer.uint32(56).bool(message.shadowMode);
      }
      if (message.quotaMode !== false) {
        writer.uint32(64).bool(message.quotaMode);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRateLimitRule();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.descriptor = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 16) {
                break;
              }
              message.requestsPerUnit = reader.uint32();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.unit = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.unlimited = reader.bool();
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.name = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 50) {
                break;
              }
              message.replaces.push(reader.string());
              continue;
            }
            case 7: {
              if (tag !== 56) {
                break;
              }
              message.shadowMode = reader.bool();
              continue;
            }
            case 8: {
              if (tag !== 64) {
                break;
              }
              message.quotaMode = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RateLimitRule.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRateLimitRule();
      message.descriptor = object.descriptor ?? "";
      message.requestsPerUnit = object.requestsPerUnit ?? 0;
      message.unit = object.unit ?? "";
      message.unlimited = object.unlimited ?? false;
      message.name = object.name ?? "";
      message.replaces = object.replaces?.map((e) => e) || [];
      message.shadowMode = object.shadowMode ?? false;
      message.quotaMode = object.quotaMode ?? false;
      return message;
    }
  };
  function createBaseRateLimitDomain() {
    return { domain: "", source: "", rules: [] };
  }
  var RateLimitDomain = {
    encode(message, writer = new BinaryWriter()) {
      if (message.domain !== "") {
        writer.uint32(10).string(message.domain);
      }
      if (message.source !== "") {
        writer.uint32(18).string(message.source);
      }
      for (const v of message.rules) {
        RateLimitRule.encode(v, writer.uint32(26).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRateLimitDomain();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.domain = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.source = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.rules.push(RateLimitRule.decode(reader, reader.uint32()));
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RateLimitDomain.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRateLimitDomain();
      message.domain = object.domain ?? "";
      message.source = object.source ?? "";
      message.rules = object.rules?.map((e) => RateLimitRule.fromPartial(e)) || [];
      return message;
    }
  };
  function createBaseRateLimitCounter() {
    return { domain: "", key: "", count: 0, windowStart: 0, unit: "", limit: 0 };
  }
  var RateLimitCounter = {
    encode(message, writer = new BinaryWriter()) {
      if (message.domain !== "") {
        writer.uint32(10).string(message.domain);
      }
      if (message.key !== "") {
        writer.uint32(18).string(message.key);
      }
      if (message.count !== 0) {
        writer.uint32(24).uint64(message.count);
      }
      if (message.windowStart !== 0) {
        writer.uint32(32).uint64(message.windowStart);
      }
      if (message.unit !== "") {
        writer.uint32(42).string(message.unit);
      }
      if (message.limit !== 0) {
        writer.uint32(48).uint64(message.limit);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseRateLimitCounter();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.domain = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.count = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.windowStart = longToNumber2(reader.uint64());
              continue;
            }
            case 5: {
              if (tag !== 42) {
                break;
              }
              message.unit = reader.string();
              continue;
            }
            case 6: {
              if (tag !== 48) {
                break;
              }
              message.limit = longToNumber2(reader.uint64());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return RateLimitCounter.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseRateLimitCounter();
      message.domain = object.domain ?? "";
      message.key = object.key ?? "";
      message.count = object.count ?? 0;
      message.windowStart = object.windowStart ?? 0;
      message.unit = object.unit ?? "";
      message.limit = object.limit ?? 0;
      return message;
    }
  };
  function createBaseGetRateLimitsResponse() {
    return { domains: [], hottest: [], maxCounters: 0, responseHeaders: false };
  }
  var GetRateLimitsResponse = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.domains) {
        RateLimitDomain.encode(v, writer.uint32(10).fork()).join();
      }
      for (const v of message.hottest) {
        RateLimitCounter.encode(v, writer.uint32(18).fork()).join();
      }
      if (message.maxCounters !== 0) {
        writer.uint32(24).uint64(message.maxCounters);
      }
      if (message.responseHeaders !== false) {
        writer.uint32(32).bool(message.responseHeaders);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseGetRateLimitsResponse();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.domains.push(RateLimitDomain.decode(reader, reader.uint32()));
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.hottest.push(RateLimitCounter.decode(reader, reader.uint32()));
              continue;
            }
            case 3: {
              if (tag !== 24) {
                break;
              }
              message.maxCounters = longToNumber2(reader.uint64());
              continue;
            }
            case 4: {
              if (tag !== 32) {
                break;
              }
              message.responseHeaders = reader.bool();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return GetRateLimitsResponse.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseGetRateLimitsResponse();
      message.domains = object.domains?.map((e) => RateLimitDomain.fromPartial(e)) || [];
      message.hottest = object.hottest?.map((e) => RateLimitCounter.fromPartial(e)) || [];
      message.maxCounters = object.maxCounters ?? 0;
      message.responseHeaders = object.responseHeaders ?? false;
      return message;
    }
  };
  function longToNumber2(int64) {
    const num = globalThis.Number(int64.toString());
    if (num > globalThis.Number.MAX_SAFE_INTEGER) {
      throw new globalThis.Error("Value is larger than Number.MAX_SAFE_INTEGER");
    }
    if (num < globalThis.Number.MIN_SAFE_INTEGER) {
      throw new globalThis.Error("Value is smaller than Number.MIN_SAFE_INTEGER");
    }
    return num;
  }

  // src/gen/google/rpc/error_details.ts
  function createBaseErrorInfo() {
    return { reason: "", domain: "", metadata: {} };
  }
  var ErrorInfo = {
    encode(message, writer = new BinaryWriter()) {
      if (message.reason !== "") {
        writer.uint32(10).string(message.reason);
      }
      if (message.domain !== "") {
        writer.uint32(18).string(message.domain);
      }
      globalThis.Object.entries(message.metadata).forEach(([key, value]) => {
        ErrorInfo_MetadataEntry.encode({ key, value }, writer.uint32(26).fork()).join();
      });
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseErrorInfo();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.reason = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.domain = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              const entry3 = ErrorInfo_MetadataEntry.decode(reader, reader.uint32());
              if (entry3.value !== void 0) {
                message.metadata[entry3.key] = entry3.value;
              }
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ErrorInfo.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseErrorInfo();
      message.reason = object.reason ?? "";
      message.domain = object.domain ?? "";
      message.metadata = globalThis.Object.entries(object.metadata ?? {}).reduce(
        (acc, [key, value]) => {
          if (value !== void 0) {
            acc[key] = globalThis.String(value);
          }
          return acc;
        },
        {}
      );
      return message;
    }
  };
  function createBaseErrorInfo_MetadataEntry() {
    return { key: "", value: "" };
  }
  var ErrorInfo_MetadataEntry = {
    encode(message, writer = new BinaryWriter()) {
      if (message.key !== "") {
        writer.uint32(10).string(message.key);
      }
      if (message.value !== "") {
        writer.uint32(18).string(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseErrorInfo_MetadataEntry();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.key = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.value = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return ErrorInfo_MetadataEntry.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseErrorInfo_MetadataEntry();
      message.key = object.key ?? "";
      message.value = object.value ?? "";
      return message;
    }
  };
  function createBaseBadRequest() {
    return { fieldViolations: [] };
  }
  var BadRequest = {
    encode(message, writer = new BinaryWriter()) {
      for (const v of message.fieldViolations) {
        BadRequest_FieldViolation.encode(v, writer.uint32(10).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseBadRequest();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.fieldViolations.push(BadRequest_FieldViolation.decode(reader, reader.uint32()));
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return BadRequest.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseBadRequest();
      message.fieldViolations = object.fieldViolations?.map((e) => BadRequest_FieldViolation.fromPartial(e)) || [];
      return message;
    }
  };
  function createBaseBadRequest_FieldViolation() {
    return { field: "", description: "", reason: "", localizedMessage: void 0 };
  }
  var BadRequest_FieldViolation = {
    encode(message, writer = new BinaryWriter()) {
      if (message.field !== "") {
        writer.uint32(10).string(message.field);
      }
      if (message.description !== "") {
        writer.uint32(18).string(message.description);
      }
      if (message.reason !== "") {
        writer.uint32(26).string(message.reason);
      }
      if (message.localizedMessage !== void 0) {
        LocalizedMessage.encode(message.localizedMessage, writer.uint32(34).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseBadRequest_FieldViolation();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.field = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.description = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.reason = reader.string();
              continue;
            }
            case 4: {
              if (tag !== 34) {
                break;
              }
              message.localizedMessage = LocalizedMessage.decode(reader, reader.uint32());
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return BadRequest_FieldViolation.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseBadRequest_FieldViolation();
      message.field = object.field ?? "";
      message.description = object.description ?? "";
      message.reason = object.reason ?? "";
      message.localizedMessage = object.localizedMessage !== void 0 && object.localizedMessage !== null ? LocalizedMessage.fromPartial(object.localizedMessage) : void 0;
      return message;
    }
  };
  function createBaseLocalizedMessage() {
    return { locale: "", message: "" };
  }
  var LocalizedMessage = {
    encode(message, writer = new BinaryWriter()) {
      if (message.locale !== "") {
        writer.uint32(10).string(message.locale);
      }
      if (message.message !== "") {
        writer.uint32(18).string(message.message);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseLocalizedMessage();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.locale = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.message = reader.string();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return LocalizedMessage.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseLocalizedMessage();
      message.locale = object.locale ?? "";
      message.message = object.message ?? "";
      return message;
    }
  };

  // src/gen/google/protobuf/any.ts
  function createBaseAny() {
    return { typeUrl: "", value: new Uint8Array(0) };
  }
  var Any = {
    encode(message, writer = new BinaryWriter()) {
      if (message.typeUrl !== "") {
        writer.uint32(10).string(message.typeUrl);
      }
      if (message.value.length !== 0) {
        writer.uint32(18).bytes(message.value);
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseAny();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 10) {
                break;
              }
              message.typeUrl = reader.string();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.value = reader.bytes();
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return Any.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseAny();
      message.typeUrl = object.typeUrl ?? "";
      message.value = object.value ?? new Uint8Array(0);
      return message;
    }
  };

  // src/gen/google/rpc/status.ts
  function createBaseStatus() {
    return { code: 0, message: "", details: [] };
  }
  var Status = {
    encode(message, writer = new BinaryWriter()) {
      if (message.code !== 0) {
        writer.uint32(8).int32(message.code);
      }
      if (message.message !== "") {
        writer.uint32(18).string(message.message);
      }
      for (const v of message.details) {
        Any.encode(v, writer.uint32(26).fork()).join();
      }
      return writer;
    },
    decode(input, length) {
      const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
      const previousRecursionDepth = reader.__tsProtoDecodeDepth ?? 0;
      if (previousRecursionDepth >= 100) {
        throw new globalThis.Error("protobuf decode recursion limit exceeded");
      }
      reader.__tsProtoDecodeDepth = previousRecursionDepth + 1;
      try {
        const end = length === void 0 ? reader.len : reader.pos + length;
        const message = createBaseStatus();
        while (reader.pos < end) {
          const tag = reader.uint32();
          switch (tag >>> 3) {
            case 1: {
              if (tag !== 8) {
                break;
              }
              message.code = reader.int32();
              continue;
            }
            case 2: {
              if (tag !== 18) {
                break;
              }
              message.message = reader.string();
              continue;
            }
            case 3: {
              if (tag !== 26) {
                break;
              }
              message.details.push(Any.decode(reader, reader.uint32()));
              continue;
            }
          }
          if ((tag & 7) === 4 || tag === 0) {
            break;
          }
          reader.skip(tag & 7);
        }
        return message;
      } finally {
        reader.__tsProtoDecodeDepth = previousRecursionDepth;
      }
    },
    create(base) {
      return Status.fromPartial(base ?? {});
    },
    fromPartial(object) {
      const message = createBaseStatus();
      message.code = object.code ?? 0;
      message.message = object.message ?? "";
      message.details = object.details?.map((e) => Any.fromPartial(e)) || [];
      return message;
    }
  };

  // src/grpcweb.ts
  var Code = {
    OK: 0,
    INVALID_ARGUMENT: 3,
    NOT_FOUND: 5,
    PERMISSION_DENIED: 7,
    FAILED_PRECONDITION: 9,
    UNAVAILABLE: 14,
    UNAUTHENTICATED: 16
  };
  var RpcError = class extends Error {
    constructor(code, message, reason = "", fields = /* @__PURE__ */ new Map()) {
      super(message);
      this.code = code;
      this.reason = reason;
      this.fields = fields;
    }
    code;
    reason;
    fields;
  };
  async function unary(path, request, req, res, token2) {
    const message = req.encode(request).finish();
    const body = new Uint8Array(5 + message.length);
    new DataView(body.buffer).setUint32(1, message.length);
    body.set(message, 5);
    const headers = {
      "content-type": "application/grpc-web+proto",
      "x-grpc-web": "1"
    };
    if (token2 !== "") headers.authorization = `Bearer ${token2}`;
    let response;
    try {
      response = await fetch(path, { method: "POST", headers, body, credentials: "omit" });
    } catch (e) {
      throw new RpcError(Code.UNAVAILABLE, `the authority cannot be reached (${String(e)})`);
    }
    if (!response.ok) {
      throw new RpcError(Code.UNAVAILABLE, `HTTP ${response.status} from the admin endpoint`);
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    let data;
    const trailers = /* @__PURE__ */ new Map();
    response.headers.forEach((value, key) => trailers.set(key, value));
    for (let at = 0; at + 5 <= bytes.length; ) {
      const flag = bytes[at];
      const length = new DataView(bytes.buffer, bytes.byteOffset + at + 1, 4).getUint32(0);
      const frame = bytes.subarray(at + 5, at + 5 + length);
      at += 5 + length;
      if ((flag & 128) === 0) {
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
    if (data === void 0) throw new RpcError(Code.UNAVAILABLE, "the answer carried no message");
    return res.decode(data);
  }
  function detailsOf(trailers) {
    const out = { reason: "", fields: /* @__PURE__ */ new Map() };
    const details = trailers.get("grpc-status-details-bin");
    if (details === void 0) return out;
    try {
      const raw = Uint8Array.from(
        atob(details.padEnd(Math.ceil(details.length / 4) * 4, "=")),
        (c) => c.charCodeAt(0)
      );
      for (const any of Status.decode(raw).details) {
        if (any.typeUrl.endsWith("google.rpc.ErrorInfo")) out.reason = ErrorInfo.decode(any.value).reason;
        if (any.typeUrl.endsWith("google.rpc.BadRequest")) {
          for (const v of BadRequest.decode(any.value).fieldViolations) out.fields.set(v.field, v.description);
        }
      }
    } catch {
    }
    return out;
  }

  // src/api.ts
  function rpc(service, method, req, res) {
    return (token2, request) => unary(`/admission.v1.${service}/${method}`, request, req, res, token2);
  }
  var api = {
    listHosts: rpc("Operator", "ListHosts", ListHostsRequest, ListHostsResponse),
    getStats: rpc("Admission", "GetStats", GetStatsRequest, Stats),
    listTickets: rpc("Operator", "ListTickets", ListTicketsRequest, ListTicketsResponse),
    release: rpc("Admission", "Release", ReleaseRequest, ReleaseResponse),
    listReservations: rpc("Operator", "ListReservations", ListReservationsRequest, ListReservationsResponse),
    resolveReservation: rpc("Operator", "ResolveReservation", ResolveReservationRequest, ResolveReservationResponse),
    unlockAuth: rpc("Operator", "UnlockAuth", UnlockAuthRequest, UnlockAuthResponse),
    getLimits: rpc("Operator", "GetLimits", GetLimitsRequest, GetLimitsResponse),
    setLimits: rpc("Operator", "SetLimits", SetLimitsRequest, SetLimitsResponse),
    resetLimits: rpc("Operator", "ResetLimits", ResetLimitsRequest, ResetLimitsResponse),
    drain: rpc("Operator", "Drain", DrainRequest, DrainResponse),
    getRateLimits: rpc("Operator", "GetRateLimits", GetRateLimitsRequest, GetRateLimitsResponse),
    listHttpPolicies: rpc("Operator", "ListHttpPolicies", ListHttpPoliciesRequest, ListHttpPoliciesResponse)
  };

  // src/dom.ts
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === void 0 || value === false) continue;
      if (typeof value === "function") el.addEventListener(name.slice(2), value);
      else el.setAttribute(name, value === true ? "" : String(value));
    }
    for (const c of children) {
      if (c === null || c === void 0 || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }
  function byId(id) {
    const el = document.getElementById(id);
    if (el === null) throw new Error(`the page has no #${id}`);
    return el;
  }
  function fill(el, ...children) {
    el.replaceChildren(...children.filter((c) => c !== null && c !== void 0 && c !== false).map((c) => c instanceof Node ? c : String(c)));
  }
  function duration(ms) {
    if (ms < 1e3) return `${Math.round(ms)} ms`;
    const s = ms / 1e3;
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
    return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
  }
  function table(head, rows, empty, sorting2) {
    if (rows.length === 0) return h("p", { class: "empty" }, empty);
    const th = (c, i) => {
      if (sorting2 === void 0 || !sorting2.sortable.includes(i)) return h("th", {}, c);
      const now = sorting2.at === i ? sorting2.desc ? "descending" : "ascending" : "none";
      return h(
        "th",
        { "aria-sort": now, class: "sortable" },
        h("button", { type: "button", "data-sort": c, onclick: () => sorting2.by(i) }, c, now === "none" ? "" : now === "ascending" ? " ▲" : " ▼")
      );
    };
    return h("table", {}, h("thead", {}, h("tr", {}, ...head.map(th))), h("tbody", {}, ...rows));
  }
  function clockTime(msFromNow) {
    return new Date(Date.now() + msFromNow).toLocaleTimeString();
  }
  function row(attrs, ...cells) {
    return h("tr", attrs, ...cells.map((c) => c instanceof HTMLTableCellElement ? c : h("td", {}, c)));
  }
  function usage(used, cap) {
    const full = cap > 0 && used >= cap;
    return h(
      "span",
      { class: full ? "usage full" : "usage" },
      h("meter", { min: 0, max: Math.max(cap, 1), value: used, high: Math.max(cap, 1) * 0.8 }),
      ` ${used} / ${cap > 0 ? cap : "∞"}`
    );
  }
  function sparkline(points, max) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    const width = 120;
    const height = 24;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(height));
    svg.setAttribute("class", "spark");
    const top = Math.max(max, 1);
    const step = points.length > 1 ? width / (points.length - 1) : 0;
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute(
      "points",
      points.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - v / top * (height - 4)).toFixed(1)}`).join(" ")
    );
    svg.append(line);
    return svg;
  }

  // src/limits.ts
  var FIELDS = [
    { path: "total", label: "Total cap", kind: "count", hint: "admitted at once, ≥ 1" },
    { path: "per_subject", label: "Per subject", kind: "count", hint: "≥ 1, unless a subject's cap below names it" },
    { path: "per_account", label: "Per account", kind: "optional-count", hint: "empty: no cap per account" },
    { path: "queue.total", label: "Queue", kind: "count", hint: "waiters; 0: no queue" },
    { path: "queue.per_subject", label: "Queue per subject", kind: "count", hint: "waiters of one subject; 0: no bound" },
    { path: "queue.hard_total", label: "Queue hard total", kind: "count", hint: "what overflow_policy: queue may grow to (≥ queue)" },
    { path: "overflow_policy", label: "Queue full", kind: "choice", hint: "what a Submit meets when the queue is full", choices: ["reject", "shed_oldest", "queue"] },
    { path: "lease_ttl_ms", label: "Lease", kind: "duration", hint: "10ms .. 1h, e.g. 30s" },
    { path: "retention_ms", label: "Ended tickets kept", kind: "duration", hint: "for idempotent retries, 0 .. 7 days" },
    { path: "max_retained", label: "Ended tickets, at most", kind: "count", hint: "kept at once" },
    { path: "priority_aging_ms", label: "Priority aging", kind: "duration", hint: "a waiter this old is served as priority 1; 0: off" },
    { path: "mode", label: "Mode", kind: "choice", hint: "shadow admits everything and reports what enforce would do", choices: ["enforce", "shadow"] }
  ];
  var MAPS = [
    { path: "subjects", label: "Subjects' caps", key: "subject", value: "cap" },
    { path: "accounts", label: "Accounts' caps", key: "account", value: "cap" },
    { path: "weights", label: "Subjects' weights", key: "subject", value: "weight (1..1000)" }
  ];
  var camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
  function formatMs(ms) {
    for (const [unit, f] of [
      ["h", 36e5],
      ["m", 6e4],
      ["s", 1e3]
    ]) {
      if (ms !== 0 && ms % f === 0) return `${ms / f}${unit}`;
    }
    return `${ms}ms`;
  }
  function parseMs(text) {
    const m = /^\s*(\d+)\s*(ms|s|m|h)?\s*$/.exec(text);
    if (m === null || m[2] === void 0 && m[1] !== "0") return null;
    const factors = { ms: 1, s: 1e3, m: 6e4, h: 36e5 };
    return Number(m[1]) * (factors[m[2] ?? "ms"] ?? 1);
  }
  function read(l, path) {
    const [a, b] = path.split(".");
    const top = l[camel(a)];
    return b === void 0 ? top : top?.[camel(b)];
  }
  function shown(l, f) {
    const v = read(l, f.path);
    if (v === void 0 || v === null) return "";
    if (f.kind === "duration") return formatMs(Number(v));
    if (f.kind === "choice" && v === "" && f.path === "mode") return "enforce";
    return String(v);
  }
  function limitsForm(l, changed) {
    const rows = FIELDS.map((f) => {
      const id = `limit-${f.path.replace(".", "-")}`;
      const value = shown(l, f);
      const input = f.kind === "choice" ? h("select", { id, "data-path": f.path, onchange: changed }, ...(f.choices ?? []).map((c) => h("option", { value: c, selected: c === value }, c))) : h("input", { id, "data-path": f.path, value, inputmode: f.kind === "duration" ? "text" : "numeric", spellcheck: "false", oninput: changed });
      return h(
        "tr",
        {},
        h("th", {}, h("label", { for: id }, f.label)),
        h("td", {}, input),
        h("td", { class: "hint" }, f.hint),
        h("td", { class: "field-error error", "data-error": f.path })
      );
    });
    const maps = MAPS.map((m) => {
      const body = h("tbody", { "data-map": m.path });
      const entries = l[m.path] ?? {};
      const add = (name, value) => body.append(mapRow(m.path, name, value, changed));
      for (const [name, value] of Object.entries(entries).sort(([a], [b]) => a.localeCompare(b))) add(name, String(value));
      return h(
        "fieldset",
        { class: "limits-map" },
        h("legend", {}, m.label),
        h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, m.key), h("th", {}, m.value), h("th", {}))), body),
        h("button", { type: "button", class: "add-row", "data-add": m.path, onclick: () => (add("", ""), changed()) }, "Add"),
        h("p", { class: "field-error error", "data-error": m.path })
      );
    });
    const adaptive = Object.keys(l.adaptiveAccounts ?? {}).length > 0 || l.adaptive !== void 0;
    return h(
      "div",
      { id: "limits-fields" },
      h("table", { class: "limits-table" }, h("tbody", {}, ...rows)),
      ...maps,
      adaptive && h("p", { class: "hint" }, "Adaptive caps are kept as they are; change them in the JSON view.")
    );
  }
  function mapRow(path, name, value, changed) {
    const tr = h(
      "tr",
      {},
      h("td", {}, h("input", { class: "map-key", value: name, spellcheck: "false", oninput: changed, "aria-label": `${path} name` })),
      h("td", {}, h("input", { class: "map-value", value, inputmode: "numeric", oninput: changed, "aria-label": `${path} value` })),
      h("td", {}, h("button", { type: "button", class: "remove-row", onclick: () => (tr.remove(), changed()) }, "Remove"))
    );
    return tr;
  }
  var FormError = class extends Error {
    constructor(fields) {
      super([...fields].map(([f, r]) => `limits.${f}: ${r}`).join("; "));
      this.fields = fields;
    }
    fields;
  };
  function formLimits(form, base) {
    const out = admission_exports.HostLimits.fromPartial(base);
    const bad = /* @__PURE__ */ new Map();
    const queue2 = admission_exports.QueueLimits.fromPartial(out.queue ?? {});
    for (const f of FIELDS) {
      const el = form.querySelector(`[data-path="${f.path}"]`);
      const text = el?.value.trim() ?? "";
      let value;
      if (f.kind === "choice") value = text;
      else if (f.kind === "duration") {
        const ms = parseMs(text);
        if (ms === null) {
          bad.set(f.path, `"${text}" is not a duration (30s, 5m, 1h, 250ms)`);
          continue;
        }
        value = ms;
      } else if (f.kind === "optional-count" && text === "") value = void 0;
      else if (/^\d+$/.test(text)) value = Number(text);
      else {
        bad.set(f.path, `"${text}" is not a whole number`);
        continue;
      }
      const [a, b] = f.path.split(".");
      if (b !== void 0) queue2[camel(b)] = value;
      else out[camel(a)] = value;
    }
    out.queue = queue2;
    for (const m of MAPS) {
      const entries = {};
      for (const tr of form.querySelectorAll(`[data-map="${m.path}"] tr`)) {
        const name = tr.querySelector(".map-key").value.trim();
        const text = tr.querySelector(".map-value").value.trim();
        if (name === "" && text === "") continue;
        if (name === "" || !/^\d+$/.test(text)) {
          bad.set(m.path, name === "" ? "a row without a name" : `${name}: "${text}" is not a whole number`);
          continue;
        }
        entries[name] = Number(text);
      }
      out[m.path] = entries;
    }
    if (bad.size > 0) throw new FormError(bad);
    return out;
  }
  function showFieldErrors(form, fields) {
    for (const el of form.querySelectorAll("[data-error]")) el.textContent = "";
    const rest = [];
    for (const [field, rule] of fields) {
      const path = field.replace(/^limits\./, "");
      const top = path.split(".")[0];
      const el = form.querySelector(`[data-error="${path}"]`) ?? (MAPS.some((m) => m.path === top) ? form.querySelector(`[data-error="${top}"]`) : null);
      if (el === null) rest.push(`${field}: ${rule}`);
      else el.textContent = el.textContent === "" ? rule : `${el.textContent}; ${rule}`;
    }
    return rest;
  }
  function jsonLimits(text) {
    const parsed = JSON.parse(text);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("the limits must be a JSON object");
    return admission_exports.HostLimits.fromPartial(fromFileSpelling(parsed, true));
  }
  var DURATIONS = /* @__PURE__ */ new Set(["lease_ttl", "retention", "priority_aging", "cooldown"]);
  var NAMED = /* @__PURE__ */ new Set(["subjects", "accounts", "weights", "adaptive_accounts", "adaptiveAccounts"]);
  function fromFileSpelling(o, renameKeys) {
    const out = {};
    for (const [k, v] of Object.entries(o)) {
      let key = k;
      let value = v;
      if (renameKeys && DURATIONS.has(k)) {
        key = `${k}_ms`;
        if (typeof v === "string") {
          const ms = parseMs(v);
          if (ms === null) throw new Error(`${k}: "${v}" is not a duration (30s, 5m, 1h, 250ms)`);
          value = ms;
        }
      }
      const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
      if (NAMED.has(k) && isObject(value)) {
        value = Object.fromEntries(Object.entries(value).map(([n, x]) => [n, isObject(x) ? fromFileSpelling(x, true) : x]));
      } else if (isObject(value)) {
        value = fromFileSpelling(value, renameKeys);
      }
      out[renameKeys ? camel(key) : key] = value;
    }
    return out;
  }

  // src/main.ts
  var TOKEN_KEY = "admission-console-token";
  var REFRESH_MS = 1e3;
  var PAGE_ROWS = 50;
  var HISTORY = 300;
  var BLOCKERS = {
    [admission_exports.Blocker.BLOCKER_TOTAL]: "host total cap",
    [admission_exports.Blocker.BLOCKER_SUBJECT]: "subject cap",
    [admission_exports.Blocker.BLOCKER_ACCOUNT]: "account cap",
    [admission_exports.Blocker.BLOCKER_MEMORY]: "memory pressure",
    [admission_exports.Blocker.BLOCKER_TURN]: "its turn (others go first)",
    [admission_exports.Blocker.BLOCKER_STATE_LOSS]: "learning window after a state loss",
    [admission_exports.Blocker.BLOCKER_KEY]: "its key (an earlier ticket of the key holds it or waits ahead)"
  };
  var KEY_POLICIES = {
    [admission_exports.KeyPolicy.KEY_POLICY_NONE]: "label",
    [admission_exports.KeyPolicy.KEY_POLICY_KEEP_NEWEST]: "keep newest",
    [admission_exports.KeyPolicy.KEY_POLICY_SERIAL]: "serial",
    [admission_exports.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST]: "serial, keep newest",
    [admission_exports.KeyPolicy.KEY_POLICY_REJECT_NEW]: "reject new"
  };
  function keyOf(t) {
    return t.key ? `${t.key} (${KEY_POLICIES[t.keyPolicy] ?? ""})` : "";
  }
  function blockerText(t, all) {
    if (t.blockedBy === admission_exports.Blocker.BLOCKER_KEY && t.debounceLeftMs > 0) {
      return `its key's debounce (${duration(t.debounceLeftMs)} left)`;
    }
    if (t.blockedBy === admission_exports.Blocker.BLOCKER_KEY) {
      const ahead = keyAhead(t, all);
      if (ahead !== void 0) {
        return `its key: ticket ${shortId(ahead.ticketId)} (run ${ahead.runId}, ${STATES[ahead.state] ?? ""}) is ahead`;
      }
    }
    return BLOCKERS[t.blockedBy] ?? "";
  }
  function keyAhead(t, all) {
    const same = all.filter((o) => o.key === t.key && o.ticketId !== t.ticketId);
    return same.find((o) => o.state !== admission_exports.TicketState.TICKET_STATE_QUEUED) ?? same.filter((o) => o.inStateMs > t.inStateMs).sort((a, b) => b.inStateMs - a.inStateMs)[0];
  }
  var STATES = {
    [admission_exports.TicketState.TICKET_STATE_QUEUED]: "queued",
    [admission_exports.TicketState.TICKET_STATE_ADMITTED]: "admitted",
    [admission_exports.TicketState.TICKET_STATE_PARKED]: "parked"
  };
  var QUEUE_SORT = { 2: (t) => t.runId, 3: (t) => t.subject, 4: (t) => t.accountId, 5: (t) => t.priority, 6: (t) => t.inStateMs, 8: (t) => t.key };
  var HOLDER_SORT = { 1: (t) => t.runId, 2: (t) => t.subject, 3: (t) => t.accountId, 4: (t) => t.instanceId, 5: (t) => t.key, 7: (t) => t.inStateMs, 8: (t) => t.leaseRemainingMs };
  function sorted(list, keys, s) {
    const key = keys[s.at];
    if (key === void 0) return list;
    const dir = s.desc ? -1 : 1;
    return [...list].sort((a, b) => {
      const x = key(a);
      const y = key(b);
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
    });
  }
  function sorting(which, keys) {
    const s = state.sort[which];
    return {
      at: s.at,
      desc: s.desc,
      sortable: Object.keys(keys).map(Number),
      by: (column) => {
        state.sort[which] = { at: column, desc: s.at === column ? !s.desc : false };
        void refresh();
      }
    };
  }
  function shown2(t) {
    const f = state.filter;
    if (f.state !== "" && STATES[t.state] !== f.state) return false;
    if (f.text === "") return true;
    const text = f.text.toLowerCase();
    return [t.runId, t.subject, t.accountId, t.key, t.ticketId].some((v) => v.toLowerCase().includes(text));
  }
  var state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    /** The host page's filter and each table's sorting (-1: as listed). */
    filter: { text: "", state: "" },
    sort: { queue: { at: -1, desc: false }, holders: { at: -1, desc: false } },
    busy: false,
    queuePage: 0,
    holderPage: 0,
    /** host → samples of its refusal counters over the last minute. */
    refusals: /* @__PURE__ */ new Map(),
    /** host → account → adaptive cap samples. */
    adaptive: /* @__PURE__ */ new Map(),
    /** The limits the editor was filled from (host, revision), and whether it was edited. */
    editor: { host: "", revision: -1, dirty: false, base: admission_exports.HostLimits.create() },
    lastHost: ""
  };
  function token() {
    return state.token ?? "";
  }
  function route() {
    const m = /^#\/host\/(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function shortId(ticketId) {
    const dot = ticketId.lastIndexOf(".");
    return dot < 0 ? ticketId : `…${ticketId.slice(-8)}`;
  }
  function showLogin(message) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    byId("app").hidden = true;
    byId("sign-out").hidden = true;
    byId("login").hidden = false;
    fill(byId("login-error"), message);
    byId("token").focus();
  }
  async function signIn(candidate) {
    try {
      await api.listHosts(candidate, {});
    } catch (e) {
      showLogin(refusalText(e));
      return;
    }
    state.token = candidate;
    sessionStorage.setItem(TOKEN_KEY, candidate);
    byId("login").hidden = true;
    byId("app").hidden = false;
    byId("sign-out").hidden = false;
    fill(byId("login-error"));
    await refresh();
  }
  function credentialRefused(e) {
    return e instanceof RpcError && (e.code === Code.UNAUTHENTICATED || e.code === Code.PERMISSION_DENIED);
  }
  function refusalText(e) {
    if (credentialRefused(e)) return `Refused: ${e.message}. The console takes an operator credential.`;
    return e instanceof Error ? e.message : String(e);
  }
  async function act(where, what) {
    try {
      fill(where, h("span", { class: "ok" }, await what()));
    } catch (e) {
      if (credentialRefused(e)) {
        showLogin(refusalText(e));
        return;
      }
      fill(where, h("span", { class: "error" }, e instanceof Error ? e.message : String(e)));
    }
    await refresh();
  }
  async function refresh() {
    if (state.token === null || state.busy) return;
    state.busy = true;
    try {
      const overview = await api.listHosts(token(), {});
      const host = route();
      banners(overview);
      if (host === "") {
        byId("host-view").hidden = true;
        byId("no-host").hidden = true;
        byId("hosts-view").hidden = false;
        fill(byId("crumb"));
        await Promise.all([hostsView(overview.hostIds), rateLimitsView()]);
      } else {
        byId("hosts-view").hidden = true;
        fill(byId("crumb"), " › ", h("strong", {}, host));
        if (host !== state.lastHost) {
          state.lastHost = host;
          state.queuePage = 0;
          state.holderPage = 0;
          state.editor = { host: "", revision: -1, dirty: false, base: admission_exports.HostLimits.create() };
          for (const id of ["holders-result", "reservations-result", "unlock-result", "limits-result"]) {
            fill(byId(id));
          }
        }
        const found = await hostView(host);
        byId("host-view").hidden = !found;
        byId("no-host").hidden = found;
      }
      fill(byId("updated"), `updated ${(/* @__PURE__ */ new Date()).toLocaleTimeString()}`);
      fill(byId("problem"));
    } catch (e) {
      if (credentialRefused(e)) {
        showLogin(refusalText(e));
      } else {
        fill(byId("problem"), h("div", { class: "banner bad" }, `The console could not refresh: ${refusalText(e)}`));
      }
    } finally {
      state.busy = false;
    }
  }
  function banners(o) {
    fill(
      byId("banners"),
      o.storeProblem !== "" && h("div", { class: "banner bad", id: "banner-store" }, `Store unavailable: ${o.storeProblem}`),
      o.note !== "" && h("div", { class: "banner warn", id: "banner-note" }, o.note),
      o.draining && h("div", { class: "banner warn", id: "banner-drain" }, "This authority process is draining: it admits nothing new.")
    );
  }
  function remember(host, stats) {
    const now = Date.now();
    const samples = state.refusals.get(host) ?? [];
    samples.push({ at: now, refused: stats.rejected + stats.shed });
    while (samples.length > 1 && now - samples[0].at > 6e4) samples.shift();
    state.refusals.set(host, samples);
    const accounts = state.adaptive.get(host) ?? /* @__PURE__ */ new Map();
    for (const a of stats.accounts) {
      if (!a.adaptive) continue;
      const points = accounts.get(a.accountId) ?? [];
      points.push(a.cap);
      if (points.length > HISTORY) points.shift();
      accounts.set(a.accountId, points);
    }
    state.adaptive.set(host, accounts);
    const first = samples[0];
    const span = now - first.at;
    return span < 1500 ? void 0 : (stats.rejected + stats.shed - first.refused) * 6e4 / span;
  }
  async function hostsView(hosts) {
    const stats = await Promise.all(hosts.map((hostId) => api.getStats(token(), { hostId })));
    const rows = hosts.map((hostId, i) => {
      const s = stats[i];
      const rate = remember(hostId, s);
      const flags = [
        s.draining && "draining",
        s.learningLeftMs > 0 && `learning ${duration(s.learningLeftMs)}`,
        s.mode === "shadow" && "shadow mode",
        s.stateLosses > 0 && stateLosses(s)
      ].filter(Boolean);
      return row(
        { "data-host": hostId },
        h("td", {}, h("a", { href: `#/host/${encodeURIComponent(hostId)}` }, hostId)),
        h("td", {}, usage(s.inFlight, s.total)),
        h("td", {}, queueUsage(s)),
        rate === void 0 ? "…" : rate.toFixed(1),
        flags.join(", ")
      );
    });
    fill(
      byId("hosts"),
      table(["host", "in flight / total", "queued / queue", "refusals per minute", "condition"], rows, "No host has state yet: the first Submit of a host creates it.")
    );
  }
  async function rateLimitsView() {
    const r = await api.getRateLimits(token(), { domain: "", limit: 20 });
    if (r.domains.length === 0) {
      fill(byId("rate-limits"));
      return;
    }
    const rules = r.domains.flatMap(
      (d) => d.rules.map(
        (x) => row(
          { "data-rule": `${d.domain}/${x.descriptor}` },
          d.domain,
          x.descriptor,
          x.unlimited ? "unlimited" : `${x.requestsPerUnit} per ${x.unit}`,
          [x.name !== "" && `name ${x.name}`, x.replaces.length > 0 && `replaces ${x.replaces.join(", ")}`, x.shadowMode && "shadow mode", x.quotaMode && "quota mode"].filter(Boolean).join(", ")
        )
      )
    );
    const hottest = r.hottest.map((c) => {
      const over = c.limit > 0 && c.count > c.limit;
      return row(
        { "data-counter": `${c.domain}/${c.key}`, class: over ? "over" : void 0 },
        c.domain,
        c.key,
        c.limit > 0 ? `${c.count} / ${c.limit}` : String(c.count),
        over ? h("td", { class: "error" }, "over the limit") : "",
        `${c.unit} from ${new Date(c.windowStart * 1e3).toISOString().replace(".000Z", "Z")}`
      );
    });
    fill(
      byId("rate-limits"),
      h("h2", {}, "Rate limits (Envoy)"),
      h(
        "p",
        { class: "summary" },
        `${r.domains.length} domain${r.domains.length === 1 ? "" : "s"} from ${r.domains.map((d) => d.source).join(", ")} · at most ${r.maxCounters} live counters per domain`
      ),
      table(["domain", "descriptor", "limit", "rule"], rules, "No descriptor has a rate_limit."),
      h("h3", {}, "Hottest counters"),
      table(["domain", "counter", "count / limit", "", "window"], hottest, "No live counter: nothing was counted in the current windows.")
    );
  }
  function stateLosses(s) {
    const n = `${s.stateLosses} state loss${s.stateLosses === 1 ? "" : "es"}`;
    return s.lastStateLossUnixMs > 0 ? `${n}, the last at ${new Date(s.lastStateLossUnixMs).toISOString().replace(/\.\d+Z$/, "Z")}` : n;
  }
  function queueUsage(s) {
    return s.queueTotal > 0 ? usage(s.queued, s.queueTotal) : "no queue";
  }
  async function hostView(hostId) {
    let limits;
    try {
      limits = await api.getLimits(token(), { hostId, orDefaults: false });
    } catch (e) {
      if (e instanceof RpcError && e.code === Code.NOT_FOUND) {
        fill(
          byId("no-host-text"),
          `The authority has no host named “${hostId}”. A host appears once a gateway's first ticket, reservation or a limits change names it, or when the configuration file lists it.`
        );
        return false;
      }
      throw e;
    }
    const [stats, list, reservations, policies] = await Promise.all([
      api.getStats(token(), { hostId }),
      api.listTickets(token(), { hostId, limit: 1e4 }),
      api.listReservations(token(), { hostId, limit: 1e3 }),
      api.listHttpPolicies(token(), { hostId })
    ]);
    remember(hostId, stats);
    caps(hostId, stats);
    const all = list.tickets;
    const queued = all.filter((t) => t.state === admission_exports.TicketState.TICKET_STATE_QUEUED);
    const holders = all.filter((t) => t.state !== admission_exports.TicketState.TICKET_STATE_QUEUED);
    const admitted = holders.filter((t) => t.state === admission_exports.TicketState.TICKET_STATE_ADMITTED);
    queue(queued.filter(shown2), all, list.truncated, estimateBasis(stats.holdAvgMs, admitted));
    holderTable(hostId, holders.filter(shown2));
    envoyPolicies(list.tickets, policies.policies);
    reservationTable(hostId, reservations.reservations);
    limitsEditor(hostId, limits);
    return true;
  }
  function caps(hostId, s) {
    const history = state.adaptive.get(hostId) ?? /* @__PURE__ */ new Map();
    const rows = [
      row({ "data-cap": "total" }, "total", usage(s.inFlight, s.total), s.queued, ""),
      ...s.subjects.map((x) => row({ "data-cap": `subject:${x.subject}` }, `subject ${x.subject}`, usage(x.inFlight, x.cap), x.queued, "")),
      ...s.accounts.map(
        (x) => row(
          { "data-cap": `account:${x.accountId}` },
          `account ${x.accountId}${x.adaptive ? " (adaptive)" : ""}`,
          usage(x.inFlight, x.cap),
          x.queued,
          x.adaptive ? sparkline(history.get(x.accountId) ?? [x.cap], Math.max(...history.get(x.accountId) ?? [x.cap])) : ""
        )
      )
    ];
    fill(
      byId("caps"),
      s.learningLeftMs > 0 && h("div", { class: "banner warn" }, `Learning window after a state loss: ${duration(s.learningLeftMs)} left; nothing new is admitted meanwhile.`),
      s.stateLosses > 0 && h("p", { class: "summary", "data-state-losses": String(s.stateLosses) }, `The shared store lost its state: ${stateLosses(s)}.`),
      h(
        "p",
        { class: "summary" },
        `mode ${s.mode || "enforce"} · ${s.queueTotal > 0 ? `queue ${s.queued} / ${s.queueTotal} (hard ${s.queueHardTotal})` : "no queue (a full host refuses BUSY)"} · mean hold ${duration(s.holdAvgMs)} · admitted ${s.admitted} · refused ${s.rejected} (${s.keyRefused} for a busy key) · shed ${s.shed} · expired ${s.expired} · superseded ${s.superseded}`
      ),
      table(["cap", "in flight / cap", "queued", "adaptive cap, last minutes"], rows, "")
    );
  }
  function pager(total, page, set, id) {
    const pages = Math.max(1, Math.ceil(total / PAGE_ROWS));
    const at = Math.min(page, pages - 1);
    return h(
      "div",
      { class: "pager", id },
      h("button", { type: "button", disabled: at === 0, onclick: () => {
        set(at - 1);
        void refresh();
      } }, "‹ earlier"),
      ` page ${at + 1} of ${pages} (${total}) `,
      h("button", { type: "button", disabled: at >= pages - 1, onclick: () => {
        set(at + 1);
        void refresh();
      } }, "later ›")
    );
  }
  function estimateBasis(holdAvgMs, admitted) {
    if (holdAvgMs === 0) return "no basis: no slot freed yet";
    const youngest = Math.min(...admitted.map((t) => t.inStateMs));
    if (admitted.length > 0 && youngest > 4 * holdAvgMs) {
      return `no basis: every holder has held over 4 × the mean hold (${duration(holdAvgMs)})`;
    }
    return "";
  }
  function queue(queued, all, truncated, noBasis) {
    const lines = /* @__PURE__ */ new Map();
    for (const t of queued) {
      const key = `priority ${t.priority} · ${t.subject}`;
      lines.set(key, (lines.get(key) ?? 0) + 1);
    }
    const summary = [...lines.entries()].sort().map(([k, n]) => h("li", {}, `${k}: ${n}`));
    const ordered = sorted(
      [...queued].sort((a, b) => (a.place || Infinity) - (b.place || Infinity)),
      QUEUE_SORT,
      state.sort.queue
    );
    const page = Math.min(state.queuePage, Math.max(0, Math.ceil(ordered.length / PAGE_ROWS) - 1));
    const rows = ordered.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map(
      (t) => row(
        { "data-ticket": t.ticketId },
        t.place > 0 ? t.place : "—",
        h("td", { title: t.ticketId }, shortId(t.ticketId)),
        t.runId,
        t.subject,
        t.accountId,
        t.priority,
        h("td", { title: `queued at ${clockTime(-t.inStateMs)}` }, duration(t.inStateMs)),
        t.place === 0 ? "—" : noBasis !== "" ? h("td", { class: "no-basis" }, noBasis) : duration(t.etaMs),
        h("td", { class: "key" }, keyOf(t)),
        h("td", { class: "blocker" }, blockerText(t, all))
      )
    );
    fill(
      byId("queue"),
      summary.length > 0 && h("ul", { class: "lines" }, ...summary),
      truncated && h("p", { class: "banner warn" }, "More than 10,000 live tickets: the listing shows the first 10,000."),
      table(["place", "ticket", "run", "subject", "account", "priority", "waited", "estimate", "key", "blocked by"], rows, filtering() ? "No waiter matches the filter." : "Nobody waits.", sorting("queue", QUEUE_SORT)),
      ordered.length > PAGE_ROWS && pager(ordered.length, page, (p) => state.queuePage = p, "queue-pager")
    );
  }
  function envoyPolicies(tickets, configured) {
    const per = /* @__PURE__ */ new Map();
    for (const t of tickets) {
      if (!t.instanceId.startsWith("envoy:")) continue;
      const policy = t.instanceId.slice("envoy:".length);
      const n = per.get(policy) ?? { holding: 0, waiting: 0 };
      if (t.state === admission_exports.TicketState.TICKET_STATE_QUEUED) n.waiting += 1;
      else n.holding += 1;
      per.set(policy, n);
    }
    const settings = new Map(configured.map((p) => [p.name, p]));
    const names = [.../* @__PURE__ */ new Set([...settings.keys(), ...per.keys()])].sort();
    const lines = names.map((policy) => {
      const n = per.get(policy) ?? { holding: 0, waiting: 0 };
      const p = settings.get(policy);
      const said = p === void 0 ? ["no longer configured"] : policySettings(p);
      return h("li", { "data-policy": policy }, `Envoy policy ${policy}: ${n.holding} holding, ${n.waiting} waiting · ${said.join(" · ")}`);
    });
    fill(byId("envoy-policies"), lines.length > 0 && h("ul", { class: "lines" }, ...lines));
  }
  function policySettings(p) {
    return [
      `subject from ${p.subject}`,
      p.account !== "" && `account from ${p.account}`,
      p.priority !== "" && `priority from ${p.priority}`,
      `max wait ${duration(p.maxWaitMs)}`,
      p.tokens !== "" ? `tokens: ${p.tokens} (default max tokens ${p.defaultMaxTokens})` : "no token reservation",
      p.key !== "" && `key from ${p.key} (${p.keyPolicy}${p.debounceMs > 0 ? `, debounce ${duration(p.debounceMs)}` : ""})`
    ].filter((x) => typeof x === "string");
  }
  function filtering() {
    return state.filter.text !== "" || state.filter.state !== "";
  }
  function holderTable(hostId, listed) {
    const holders = sorted(listed, HOLDER_SORT, state.sort.holders);
    const page = Math.min(state.holderPage, Math.max(0, Math.ceil(holders.length / PAGE_ROWS) - 1));
    const out = byId("holders-result");
    const rows = holders.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map(
      (t) => row(
        { "data-ticket": t.ticketId },
        h("td", { title: t.ticketId }, shortId(t.ticketId)),
        t.runId,
        t.subject,
        t.accountId,
        t.instanceId,
        h("td", { class: "key" }, keyOf(t), t.supersededBy && ` · superseded by ${shortId(t.supersededBy)}`),
        STATES[t.state] ?? "",
        h("td", { title: `since ${clockTime(-t.inStateMs)}` }, duration(t.inStateMs)),
        h("td", { title: `until ${clockTime(t.leaseRemainingMs)}` }, duration(t.leaseRemainingMs)),
        h(
          "td",
          {},
          h(
            "button",
            {
              type: "button",
              class: "release",
              onclick: () => confirmThen(
                `Release run ${t.runId} (ticket ${shortId(t.ticketId)}, subject ${t.subject})? Its slot goes to the next waiter; the run itself is not stopped, and its gateway learns at its next renewal that it lost the slot.`,
                "Release",
                () => act(out, async () => {
                  const r = await api.release(token(), admission_exports.ReleaseRequest.create({ ticketId: t.ticketId }));
                  return `Released ${shortId(t.ticketId)} (run ${t.runId}); it was ${stateName(r.previousState)}.`;
                })
              )
            },
            "Release"
          )
        )
      )
    );
    fill(
      byId("holders"),
      table(
        ["ticket", "run", "subject", "account", "gateway instance", "key", "state", "held for", "lease left", ""],
        rows,
        filtering() ? "No holder matches the filter." : "Nobody holds a slot.",
        sorting("holders", HOLDER_SORT)
      ),
      holders.length > PAGE_ROWS && pager(holders.length, page, (p) => state.holderPage = p, "holder-pager")
    );
    const form = byId("release-run");
    form.onsubmit = (e) => {
      e.preventDefault();
      const runId = byId("release-run-id").value.trim();
      confirmThen(
        `Release run ${runId} on ${hostId}? Its slot goes to the next waiter.`,
        "Release",
        () => act(out, async () => {
          const r = await api.release(token(), admission_exports.ReleaseRequest.create({ hostId, runId }));
          return r.ticketId === "" ? `No ticket of run ${runId} on ${hostId}.` : `Released run ${runId}; it was ${stateName(r.previousState)}.`;
        })
      );
    };
  }
  function stateName(s) {
    return admission_exports.TicketState[s]?.replace("TICKET_STATE_", "").toLowerCase() ?? String(s);
  }
  function reservationTable(hostId, list) {
    const out = byId("reservations-result");
    const resolve = (r, resolution, label) => h(
      "button",
      {
        type: "button",
        onclick: () => act(out, async () => {
          await api.resolveReservation(token(), { hostId, runId: r.runId, step: r.step, resolution });
          return `Resolved ${r.runId} step ${r.step} as ${label}.`;
        })
      },
      label
    );
    const rows = list.map((r) => {
      const uncertain = r.state === admission_exports.ReservationState.RESERVATION_STATE_UNCERTAIN;
      return row(
        { "data-reservation": `${r.runId}/${r.step}` },
        r.runId,
        r.step,
        r.subject,
        r.accountId,
        r.model,
        uncertain ? "uncertain" : "reserved",
        r.reservedTokens,
        r.reservedCostUsd.toFixed(4),
        duration(r.ageMs),
        h(
          "td",
          {},
          uncertain && resolve(r, admission_exports.Resolution.RESOLUTION_CONSUMED, "consumed"),
          uncertain && resolve(r, admission_exports.Resolution.RESOLUTION_RELEASED, "released")
        )
      );
    });
    fill(
      byId("reservations"),
      table(["run", "step", "subject", "account", "model", "state", "tokens", "cost (USD)", "age", "resolve"], rows, "No open reservation.")
    );
  }
  function limitsEditor(hostId, r) {
    const source = r.source === admission_exports.LimitsSource.LIMITS_SOURCE_OPERATOR ? "set by an operator" : "from the configuration (file, flags, built-in defaults)";
    fill(byId("limits-info"), h("span", { id: "limits-revision" }, `revision ${r.revision}`), `, ${source}`);
    const e = state.editor;
    if (e.host !== hostId || !e.dirty && e.revision !== r.revision) {
      const limits = r.limits ?? admission_exports.HostLimits.create();
      fill(byId("limits-form-fields"), limitsForm(limits, () => state.editor.dirty = true));
      byId("limits-json").value = JSON.stringify(limits, null, 2);
      state.editor = { host: hostId, revision: r.revision, dirty: false, base: limits };
    } else if (e.dirty && e.revision !== r.revision) {
      fill(byId("limits-result"), h("span", { class: "warn" }, `The limits changed to revision ${r.revision} since you read revision ${e.revision}.`));
    }
  }
  function editedLimits() {
    if (byId("limits-as-json").checked) {
      try {
        return jsonLimits(byId("limits-json").value);
      } catch (e) {
        throw new Error(`Not applied: the limits are not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return formLimits(byId("limits-form-fields"), state.editor.base);
  }
  function wireFilter() {
    const text = byId("filter-text");
    const which = byId("filter-state");
    const apply = () => {
      state.filter = { text: text.value.trim(), state: which.value };
      state.queuePage = 0;
      state.holderPage = 0;
      void refresh();
    };
    text.oninput = apply;
    which.onchange = apply;
    byId("ticket-filter").onsubmit = (e) => {
      e.preventDefault();
      apply();
    };
  }
  function wireLimits() {
    const editor = byId("limits-json");
    const fields = byId("limits-form-fields");
    const out = byId("limits-result");
    editor.oninput = () => state.editor.dirty = true;
    const reload = () => {
      state.editor = { host: "", revision: -1, dirty: false, base: admission_exports.HostLimits.create() };
    };
    byId("limits-as-json").onchange = (ev) => {
      const json = ev.target.checked;
      try {
        if (json) editor.value = JSON.stringify(formLimits(fields, state.editor.base), null, 2);
        else fill(fields, limitsForm(jsonLimits(editor.value), () => state.editor.dirty = true));
      } catch {
      }
      editor.hidden = !json;
      fields.hidden = json;
    };
    byId("limits-form").onsubmit = (ev) => {
      ev.preventDefault();
      const hostId = route();
      const read2 = state.editor.revision;
      void act(out, async () => {
        showFieldErrors(fields, /* @__PURE__ */ new Map());
        let limits;
        try {
          limits = editedLimits();
        } catch (e) {
          if (e instanceof FormError) {
            showFieldErrors(fields, new Map([...e.fields].map(([f, r]) => [`limits.${f}`, r])));
            throw new Error("Not applied: the fields marked beside them are not valid.");
          }
          throw e;
        }
        try {
          const r = await api.setLimits(token(), { hostId, limits, expectedRevision: read2 });
          reload();
          return `Applied: now revision ${r.revision}.`;
        } catch (e) {
          if (e instanceof RpcError && e.code === Code.FAILED_PRECONDITION) {
            reload();
            throw new Error(`Not applied: the limits changed since you read them at revision ${read2} (${e.message}). Reloaded the current ones.`);
          }
          if (e instanceof RpcError && e.code === Code.INVALID_ARGUMENT && e.fields.size > 0) {
            const rest = byId("limits-as-json").checked ? [...e.fields].map(([f, r]) => `${f}: ${r}`) : showFieldErrors(fields, e.fields);
            throw new Error(`Not applied: the authority refused ${e.fields.size === 1 ? "a field" : `${e.fields.size} fields`}${rest.length > 0 ? `: ${rest.join("; ")}` : ", marked beside them"}.`);
          }
          throw e;
        }
      });
    };
    byId("limits-reload").onclick = () => {
      reload();
      fill(out);
      void refresh();
    };
    byId("limits-reset").onclick = () => confirmThen(
      "Return this host to the configured limits (file, flags, built-in defaults)? Limits set by operators are dropped.",
      "Reset",
      () => act(out, async () => {
        const r = await api.resetLimits(token(), { hostId: route(), expectedRevision: 0 });
        reload();
        return `Reset to the file's limits: now revision ${r.revision}.`;
      })
    );
  }
  function wireAuth() {
    byId("unlock-form").onsubmit = (ev) => {
      ev.preventDefault();
      const endpoint = byId("unlock-endpoint").value.trim();
      const identity = byId("unlock-identity").value;
      void act(byId("unlock-result"), async () => {
        const r = await api.unlockAuth(token(), { endpoint, identity });
        return r.wasLocked ? `Unlocked: ${identity} was locked out of ${endpoint}; cleared.` : `${identity} was not locked out of ${endpoint}${r.cleared ? "; its attempts were cleared" : ""}.`;
      });
    };
  }
  function confirmThen(text, confirm, then) {
    const dialog = byId("confirm");
    fill(byId("confirm-text"), text);
    const yes = byId("confirm-yes");
    fill(yes, confirm);
    yes.onclick = () => {
      dialog.close();
      void then();
    };
    byId("confirm-no").onclick = () => dialog.close();
    dialog.showModal();
  }
  function wireDrain() {
    byId("drain").onclick = () => confirmThen(
      "Drain this authority process? It stops admitting new tickets (they are refused DRAINING) while admitted ones finish. This cannot be undone without restarting the process.",
      "Drain",
      () => act(byId("drain-result"), async () => {
        const r = await api.drain(token(), {});
        return r.started ? "Draining started." : "It was already draining.";
      })
    );
  }
  function start() {
    byId("login-form").onsubmit = (e) => {
      e.preventDefault();
      void signIn(byId("token").value.trim());
    };
    byId("sign-out").onclick = () => showLogin("Signed out.");
    wireLimits();
    wireFilter();
    wireAuth();
    wireDrain();
    window.addEventListener("hashchange", () => void refresh());
    setInterval(() => {
      if (!document.hidden) void refresh();
    }, REFRESH_MS);
    if (state.token === null) showLogin("");
    else void signIn(state.token);
  }
  start();
})();
