"""Confluent's error answers: an HTTP status, and a body ``{"error_code": N, "message": "..."}``
whose code clients match on (40401 subject not found, 42201 invalid schema...)."""

from __future__ import annotations

from odradek.errors import OdradekError

__all__ = ["RestError"]


class RestError(OdradekError):
    """An error answer of the registry."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}

    # -- Confluent's errors, with its messages ---------------------------------------------------

    @classmethod
    def subject_not_found(cls, subject: str | None) -> RestError:
        return cls(404, 40401, f"Subject '{subject}' not found.")

    @classmethod
    def version_not_found(cls, version: int) -> RestError:
        return cls(404, 40402, f"Version {version} not found.")

    @classmethod
    def schema_not_found(cls, schema_id: int | None = None) -> RestError:
        return cls(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")

    @classmethod
    def subject_soft_deleted(cls, subject: str) -> RestError:
        return cls(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")

    @classmethod
    def subject_not_soft_deleted(cls, subject: str) -> RestError:
        return cls(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")

    @classmethod
    def version_soft_deleted(cls, subject: str, version: int) -> RestError:
        return cls(404, 40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete "
                               "permanently")

    @classmethod
    def version_not_soft_deleted(cls, subject: str, version: int) -> RestError:
        return cls(404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being "
                               "permanently deleted")

    @classmethod
    def subject_config_not_found(cls, subject: str) -> RestError:
        return cls(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    @classmethod
    def subject_mode_not_found(cls, subject: str) -> RestError:
        return cls(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")

    @classmethod
    def incompatible(cls, subject: str, details: list[str]) -> RestError:
        return cls(409, 409, f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
                             f"details: [{', '.join(details)}]")

    @classmethod
    def invalid_schema(cls, message: str) -> RestError:
        return cls(422, 42201, message)

    @classmethod
    def invalid_version(cls, version: str) -> RestError:
        return cls(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed values are "
                               'between [1, 2^31-1] and the string "latest"')

    @classmethod
    def invalid_compatibility(cls) -> RestError:
        return cls(422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, full, "
                               "backward_transitive, forward_transitive, and full_transitive")

    @classmethod
    def invalid_mode(cls, message: str = "Invalid mode. Valid values are READWRITE, READONLY, IMPORT and FORWARD.") -> RestError:
        return cls(422, 42204, message)

    @classmethod
    def not_permitted(cls, message: str) -> RestError:
        return cls(422, 42205, message)

    @classmethod
    def reference_exists(cls, key: str) -> RestError:
        return cls(422, 42206, f"One or more references exist to the schema {key}.")

    @classmethod
    def invalid_subject(cls, subject: str) -> RestError:
        return cls(422, 42208, f"The specified subject '{subject}' is not a valid.")

    @classmethod
    def schema_too_large(cls, message: str) -> RestError:
        return cls(422, 42209, message)

    @classmethod
    def store(cls, message: str) -> RestError:
        return cls(500, 50001, message)

    @classmethod
    def timeout(cls, message: str) -> RestError:
        return cls(500, 50002, message)

    @classmethod
    def forwarding_failed(cls, message: str) -> RestError:
        return cls(500, 50003, message)

    @classmethod
    def unknown_leader(cls, message: str) -> RestError:
        return cls(500, 50004, message)

    @classmethod
    def unauthorized(cls) -> RestError:
        return cls(401, 401, "Unauthorized")

    @classmethod
    def forbidden(cls, message: str) -> RestError:
        return cls(403, 40301, message)

    @classmethod
    def not_found(cls) -> RestError:
        return cls(404, 404, "HTTP 404 Not Found")

    @classmethod
    def method_not_allowed(cls) -> RestError:
        return cls(405, 405, "HTTP 405 Method Not Allowed")

    @classmethod
    def unsupported_media_type(cls) -> RestError:
        return cls(415, 415, "HTTP 415 Unsupported Media Type")

    @classmethod
    def not_acceptable(cls) -> RestError:
        return cls(406, 406, "HTTP 406 Not Acceptable")

    @classmethod
    def bad_request(cls, message: str) -> RestError:
        return cls(400, 400, message)

    @classmethod
    def unprocessable(cls, message: str) -> RestError:
        """A body that is not the JSON the endpoint takes (Jersey's 422)."""
        return cls(422, 422, message)
