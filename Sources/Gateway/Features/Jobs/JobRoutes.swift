/// The Job Manager: a peer's jobs and sending one to another peer.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum JobRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/jobs", "createJob", body: Schemas.jobInput, returns: Schemas.jobEnvelope,
      links: .id(at: "/job/id", as: "jobId", to: ["getJob", "updateJob", "deleteJob", "sendJob"]),
      """
      Adds a job to this peer's list.
      201 The job.
      400 Invalid field.
      """
    ) { node, context in try await node.features.jobs.create(context, node: node) },
    Route(
      .get, "/api/v1/jobs", "listJobs", returns: Schemas.jobList, query: [.limit(max: 500), .cursor],
      """
      This peer's jobs, oldest first, paged.
      200 A page of jobs.
      400 Bad limit.
      """
    ) { node, context in try await node.features.jobs.list(context, node: node) },
    Route(
      .get, "/api/v1/jobs/{jobId}", "getJob", returns: Schemas.jobEnvelope,
      """
      One job.
      200 The job.
      404 Not in this peer's list.
      """
    ) { node, context in try await node.features.jobs.get(context, node: node) },
    Route(
      .patch, "/api/v1/jobs/{jobId}", "updateJob", body: Schemas.jobPatch, returns: Schemas.jobEnvelope,
      """
      Changes a job's fields (null clears an optional one).
      200 The job.
      400 Invalid field.
      404 Not in this peer's list.
      """
    ) { node, context in try await node.features.jobs.update(context, node: node) },
    Route(
      .delete, "/api/v1/jobs/{jobId}", "deleteJob",
      """
      Removes a job from this peer's list.
      204 Deleted.
      404 Not in this peer's list.
      """
    ) { node, context in try await node.features.jobs.delete(context, node: node) },
    Route(
      .post, "/api/v1/jobs/{jobId}/send", "sendJob", body: Schemas.sendJob, returns: Schemas.jobOffer,
      """
      Offers the job to a peer receiving jobs (advertising jobmanager-jobs): an invitation (60 s unless timeoutSeconds says otherwise) whose context is the whole job (the name, then Due:, Payment: and Notes: lines for the fields set; at most 4 KiB); on accept the job lands in their list (job.received) and yours shows assignedTo (job.delivered).
      202 Offered; the answer arrives as events.
      404 Unknown job or peer.
      409 Not receiving jobs, already assigned or already offered.
      """
    ) { node, context in try await node.features.jobs.send(context, node: node) },
  ]
}

extension Schemas {
  static let job: JSONValue = [
    "type": "object", "required": ["id", "name", "createdAt", "updatedAt"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": ["type": ["string", "null"], "pattern": "^[0-9]+\\.[0-9]{2}$"],
      "notes": ["type": ["string", "null"]], "assignedTo": ["type": ["object", "null"]],
      "receivedFrom": ["type": ["object", "null"]], "createdAt": ["type": "string"], "updatedAt": ["type": "string"],
    ],
  ]
  /// A payment as a request gives it (JobRules.payment): a JSON number or a decimal string.
  static let paymentInput: JSONValue = [
    "type": ["number", "string", "null"], "minimum": 0, "maximum": 9_999_999_999_999.99,
    "pattern": "^[0-9]{1,13}(\\.[0-9]{1,2})?$",
    "description": "Non-negative, at most 2 decimal places, at most 9999999999999.99, e.g. 120 or \"99.50\".",
  ]
  static let jobInput: JSONValue = [
    "type": "object", "required": ["name"], "additionalProperties": false,
    "properties": [
      "name": ["type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"],
      "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": paymentInput,
      "notes": ["type": ["string", "null"], "description": "At most 4 KiB of UTF-8."],
    ],
  ]
  static let jobPatch: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": [
      "name": ["type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"],
      "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": paymentInput,
      "notes": ["type": ["string", "null"]],
    ],
  ]
  static let jobEnvelope = envelope("job", job)
  static let jobList = page("jobs", of: job)
  static let sendJob: JSONValue = [
    "type": "object", "required": ["to"], "additionalProperties": false,
    "properties": [
      "to": ["type": "string"],
      "timeoutSeconds": [
        "type": "integer", "minimum": 1, "maximum": 300, "default": 60,
        "description":
          "As for invitations (one grace second more for a receiver on another node), but 60 s by default: a job offer is read before it is answered.",
      ],
    ],
  ]
  static let jobOffer: JSONValue = [
    "type": "object", "required": ["job", "invitation"], "properties": ["job": job, "invitation": invitation],
  ]
}
