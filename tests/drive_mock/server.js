// The Drive API emulator for the suite: google-drive-mock (npm), with the few
// upload routes it lacks or cannot do binary-safely mounted in front of it.
//
// google-drive-mock parses request bodies as JSON or text, so binary file
// content (a checkpoint shard) is mangled, JSON content is re-serialised
// (its bytes and md5 change), and it has no resumable uploads. The routes
// below keep content as raw bytes and follow the documented Drive API:
//
//   POST  /upload/drive/v3/files?uploadType=multipart      create (metadata + bytes)
//   POST  /upload/drive/v3/files?uploadType=resumable      start a resumable create
//   PATCH /upload/drive/v3/files/:id?uploadType=resumable  start a resumable update
//   PUT   <session URL>  Content-Range: bytes a-b/total    one chunk (308 until whole)
//   PATCH /upload/drive/v3/files/:id?uploadType=media      replace the content
//   PUT   /upload/drive/v2/files/:id?uploadType=media      replace it, If-Match: etag
//
// A create naming an id that exists is refused with 409, as Drive does.
// POST /debug/corrupt-uploads?count=N (tests only, no such route on Drive)
// makes the next N uploads store their bytes with one byte inverted: damage
// in transit that only the MD5 Drive reports can reveal.
//
// And what real Drive does that google-drive-mock lacks:
//
//   PATCH  /drive/v3/files/:id   appProperties merged key by key (null removes
//                                one), as Drive does, not replaced whole
//   DELETE /drive/v3/files/:id   a file another user owns: 403
//                                insufficientFilePermissions (My Drive); a
//                                folder: everything below it goes too
//   POST /debug/foreign-file     (tests only) a file owned by another user,
//                                shared with this one: {name, parents, content}
//
// The trash is the mock's own and matches Drive: files.list returns trashed
// files unless the query says `trashed = false`; PATCH {trashed} moves a
// file in and out of it.
// Everything else (generateIds, get, alt=media, list with q, delete, about)
// is google-drive-mock's own. Run: node server.js PORT (NODE_PATH naming
// the folder that holds google-drive-mock, express and cors).

"use strict";

const crypto = require("crypto");
const express = require("express");
const { createApp } = require("google-drive-mock/dist/index.js");
const { driveStore } = require("google-drive-mock/dist/store.js");
const { toV3File, toV2File, applyFields } = require("google-drive-mock/dist/mappers.js");

const VALID_TOKENS = new Set(["valid-token", "another-valid-token"]);
const FOLDER_MIME = "application/vnd.google-apps.folder";
const FOREIGN_OWNER = "someone-else@example.com";
const sessions = new Map(); // upload_id -> {metadata, fileId, chunks, received, total}
let corruptUploads = 0;

// What an upload stores: its bytes, damaged while corrupt-uploads lasts.
function arrived(content) {
  const bytes = Buffer.from(content || []);
  if (corruptUploads > 0 && bytes.length > 0) {
    corruptUploads -= 1;
    bytes[Math.floor(bytes.length / 2)] ^= 0xff;
  }
  return bytes;
}

function authorised(req, res) {
  const header = req.headers.authorization || "";
  if (!VALID_TOKENS.has(header.split(" ")[1])) {
    res.status(401).json({ error: { code: 401, message: "Invalid Credentials" } });
    return false;
  }
  return true;
}

function fileReply(res, file, fields) {
  const body = toV3File(file);
  res.status(200).json(fields ? applyFields(body, fields) : body);
}

function createWith(metadata, content, res, fields) {
  if (metadata.id && driveStore.getFile(metadata.id)) {
    res.status(409).json({
      error: { code: 409, message: "A file already exists with the provided ID.",
               errors: [{ reason: "duplicate", message: "duplicate id" }] },
    });
    return;
  }
  const file = driveStore.createFile({
    ...metadata,
    content: arrived(content),
    name: metadata.name || "Untitled",
    mimeType: metadata.mimeType || "application/octet-stream",
    parents: metadata.parents || [],
  });
  fileReply(res, file, fields);
}

// multipart/related, split on the boundary as bytes: part 1 JSON metadata, part 2 content.
function splitMultipart(body, contentType) {
  const match = /boundary="?([^";]+)"?/.exec(contentType || "");
  if (!match) return null;
  const delimiter = Buffer.from(`--${match[1]}`);
  const parts = [];
  let start = body.indexOf(delimiter);
  while (start !== -1) {
    const next = body.indexOf(delimiter, start + delimiter.length);
    if (next === -1) break;
    parts.push(body.subarray(start + delimiter.length, next));
    start = next;
  }
  const parse = (part) => {
    const split = part.indexOf("\r\n\r\n");
    if (split === -1) return null;
    let content = part.subarray(split + 4);
    if (content.subarray(-2).toString() === "\r\n") content = content.subarray(0, -2);
    return content;
  };
  if (parts.length < 2) return null;
  const meta = parse(parts[0]);
  const content = parse(parts[1]);
  if (meta === null || content === null) return null;
  return { metadata: JSON.parse(meta.toString("utf8") || "{}"), content: Buffer.from(content) };
}

function startSession(req, res, fileId) {
  let metadata = {};
  if (req.body && req.body.length) metadata = JSON.parse(req.body.toString("utf8"));
  if (fileId && !driveStore.getFile(fileId)) {
    res.status(404).json({ error: { code: 404, message: "File not found" } });
    return;
  }
  const id = crypto.randomBytes(12).toString("hex");
  const total = req.headers["x-upload-content-length"];
  sessions.set(id, { metadata, fileId, chunks: [], received: 0,
                     total: total === undefined ? null : Number(total) });
  const host = req.headers.host;
  res.setHeader("Location", `http://${host}/upload/drive/v3/files?uploadType=resumable&upload_id=${id}`);
  res.status(200).send("");
}

function main() {
  const port = Number(process.argv[2]);
  const app = express();
  const raw = express.raw({ type: () => true, limit: "1gb" });

  // Tokens of the tests' credential stand-in (tests/support/fake_credentials.py)
  // are good here; a checking FaultProxy in front decides which expired.
  app.use((req, res, next) => {
    if ((req.headers.authorization || "").startsWith("Bearer ya29.fake-")) {
      req.headers.authorization = "Bearer valid-token";
    }
    next();
  });

  app.post("/debug/corrupt-uploads", (req, res) => {
    corruptUploads = Number(req.query.count || 1);
    res.status(200).send("");
  });

  app.post("/debug/foreign-file", express.json(), (req, res) => {
    const body = req.body || {};
    const file = driveStore.createFile({
      name: body.name || "Untitled",
      parents: body.parents || [],
      mimeType: body.mimeType || "text/plain",
      content: Buffer.from(body.content || "", "utf8"),
      ownedByMe: false,
      owners: [{ kind: "drive#user", emailAddress: FOREIGN_OWNER, me: false }],
    });
    res.status(200).json({ id: file.id });
  });

  app.patch("/drive/v3/files/:fileId", express.json(), (req, res, next) => {
    if (!authorised(req, res)) return;
    const file = driveStore.getFile(req.params.fileId);
    const body = req.body || {};
    if (!file || body.appProperties === undefined) return next();
    const merged = { ...(file.appProperties || {}) };
    for (const [key, value] of Object.entries(body.appProperties || {})) {
      if (value === null) delete merged[key];
      else merged[key] = String(value);
    }
    const updated = driveStore.updateFile(file.id, { ...body, appProperties: merged });
    fileReply(res, updated, req.query.fields);
  });

  app.delete("/drive/v3/files/:fileId", (req, res, next) => {
    if (!authorised(req, res)) return;
    const file = driveStore.getFile(req.params.fileId);
    if (!file) return next();
    if (file.ownedByMe === false) {
      res.status(403).json({
        error: { code: 403, message: "The user does not have sufficient permissions for this file.",
                 errors: [{ reason: "insufficientFilePermissions", message: "insufficient permissions" }] },
      });
      return;
    }
    if (file.mimeType === FOLDER_MIME) {
      const below = (id) => driveStore.listFiles().filter((f) => (f.parents || []).includes(id));
      const doomed = [];
      const walk = (id) => below(id).forEach((child) => { doomed.push(child.id); walk(child.id); });
      walk(file.id);
      doomed.forEach((id) => driveStore.deleteFile(id));
    }
    return next();
  });

  app.post("/upload/drive/v3/files", raw, (req, res, next) => {
    if (!authorised(req, res)) return;
    const kind = req.query.uploadType;
    if (kind === "resumable") return startSession(req, res, null);
    if (kind !== "multipart") return next();
    const parsed = splitMultipart(req.body, req.headers["content-type"]);
    if (!parsed) {
      res.status(400).json({ error: { code: 400, message: "Invalid multipart body" } });
      return;
    }
    createWith(parsed.metadata, parsed.content, res, req.query.fields);
  });

  app.patch("/upload/drive/v3/files/:fileId", raw, (req, res, next) => {
    if (!authorised(req, res)) return;
    const kind = req.query.uploadType;
    if (kind === "resumable") return startSession(req, res, req.params.fileId);
    if (kind !== "media") return next();
    const file = driveStore.updateFile(req.params.fileId, { content: arrived(req.body) });
    if (!file) {
      res.status(404).json({ error: { code: 404, message: "File not found" } });
      return;
    }
    fileReply(res, file, req.query.fields);
  });

  app.put("/upload/drive/v3/files", raw, (req, res) => {
    if (!authorised(req, res)) return;
    const session = sessions.get(req.query.upload_id);
    if (!session) {
      res.status(404).json({ error: { code: 404, message: "Upload session not found" } });
      return;
    }
    const range = /bytes (\*|(\d+)-(\d+))\/(\*|\d+)/.exec(req.headers["content-range"] || "");
    const body = Buffer.from(req.body || []);
    if (range && range[4] !== "*") session.total = Number(range[4]);
    if (range && range[2] !== undefined) {
      const first = Number(range[2]);
      if (first !== session.received) {
        res.status(400).json({ error: { code: 400, message: "Chunk out of order" } });
        return;
      }
      session.chunks.push(body);
      session.received += body.length;
    } else if (!range && body.length) {
      session.chunks.push(body);
      session.received += body.length;
      session.total = session.received;
    }
    if (session.total === null || session.received < session.total) {
      if (session.received > 0) res.setHeader("Range", `bytes=0-${session.received - 1}`);
      res.status(308).send("");
      return;
    }
    sessions.delete(req.query.upload_id);
    const content = Buffer.concat(session.chunks);
    if (session.fileId) {
      const file = driveStore.updateFile(session.fileId, { content: arrived(content) });
      if (!file) {
        res.status(404).json({ error: { code: 404, message: "File not found" } });
        return;
      }
      fileReply(res, file, req.query.fields);
      return;
    }
    createWith(session.metadata, content, res, req.query.fields);
  });

  app.put("/upload/drive/v2/files/:fileId", raw, (req, res, next) => {
    if (!authorised(req, res)) return;
    if (req.query.uploadType !== "media") return next();
    const existing = driveStore.getFile(req.params.fileId);
    if (!existing) {
      res.status(404).json({ error: { code: 404, message: "File not found" } });
      return;
    }
    const ifMatch = req.headers["if-match"];
    if (ifMatch && ifMatch !== "*" && ifMatch !== existing.etag) {
      res.status(412).json({
        error: { code: 412, message: "Precondition Failed",
                 errors: [{ reason: "conditionNotMet", message: "Precondition Failed" }] },
      });
      return;
    }
    const file = driveStore.updateFile(req.params.fileId, { content: Buffer.from(req.body || []) });
    res.setHeader("ETag", file.etag);
    res.status(200).json(toV2File(file));
  });

  app.use(createApp());
  app.listen(port, "127.0.0.1");
}

main();
