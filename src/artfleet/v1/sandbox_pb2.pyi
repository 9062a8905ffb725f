from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEC_MODE_UNSPECIFIED: _ClassVar[ExecMode]
    EXEC_MODE_REPL: _ClassVar[ExecMode]
    EXEC_MODE_STATELESS: _ClassVar[ExecMode]
EXEC_MODE_UNSPECIFIED: ExecMode
EXEC_MODE_REPL: ExecMode
EXEC_MODE_STATELESS: ExecMode

class ImageCheckRequest(_message.Message):
    __slots__ = ("images",)
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, images: _Optional[_Iterable[str]] = ...) -> None: ...

class ImageCheckResponse(_message.Message):
    __slots__ = ("missing", "pull_allowed", "backend", "runs_images")
    MISSING_FIELD_NUMBER: _ClassVar[int]
    PULL_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RUNS_IMAGES_FIELD_NUMBER: _ClassVar[int]
    missing: _containers.RepeatedScalarFieldContainer[str]
    pull_allowed: bool
    backend: str
    runs_images: bool
    def __init__(self, missing: _Optional[_Iterable[str]] = ..., pull_allowed: _Optional[bool] = ..., backend: _Optional[str] = ..., runs_images: _Optional[bool] = ...) -> None: ...

class StdioStart(_message.Message):
    __slots__ = ("image", "args", "env", "job_id", "resources", "network", "startup_timeout_s", "idle_timeout_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    image: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    job_id: str
    resources: Resources
    network: bool
    startup_timeout_s: float
    idle_timeout_s: float
    def __init__(self, image: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., job_id: _Optional[str] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., network: _Optional[bool] = ..., startup_timeout_s: _Optional[float] = ..., idle_timeout_s: _Optional[float] = ...) -> None: ...

class StdioExit(_message.Message):
    __slots__ = ("exit_code",)
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    def __init__(self, exit_code: _Optional[int] = ...) -> None: ...

class StdioChunk(_message.Message):
    __slots__ = ("start", "data", "close_stdin", "stderr", "exit")
    START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    start: StdioStart
    data: bytes
    close_stdin: bool
    stderr: bytes
    exit: StdioExit
    def __init__(self, start: _Optional[_Union[StdioStart, _Mapping]] = ..., data: _Optional[bytes] = ..., close_stdin: _Optional[bool] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[StdioExit, _Mapping]] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ("path", "content", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("image", "files", "env", "network", "job_id", "idle_ttl_s", "resources", "exec_mode", "repo", "owner", "owner_lease_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    EXEC_MODE_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    OWNER_LEASE_S_FIELD_NUMBER: _ClassVar[int]
    image: str
    files: _containers.RepeatedCompositeFieldContainer[File]
    env: _containers.ScalarMap[str, str]
    network: bool
    job_id: str
    idle_ttl_s: float
    resources: Resources
    exec_mode: ExecMode
    repo: RepoSource
    owner: str
    owner_lease_s: float
    def __init__(self, image: _Optional[str] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., env: _Optional[_Mapping[str, str]] = ..., network: _Optional[bool] = ..., job_id: _Optional[str] = ..., idle_ttl_s: _Optional[float] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., exec_mode: _Optional[_Union[ExecMode, str]] = ..., repo: _Optional[_Union[RepoSource, _Mapping]] = ..., owner: _Optional[str] = ..., owner_lease_s: _Optional[float] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("owner", "lease_s")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    owner: str
    lease_s: float
    def __init__(self, owner: _Optional[str] = ..., lease_s: _Optional[float] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: int
    def __init__(self, sessions: _Optional[int] = ...) -> None: ...

class RepoSource(_message.Message):
    __slots__ = ("path", "commit", "dest")
    PATH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    DEST_FIELD_NUMBER: _ClassVar[int]
    path: str
    commit: str
    dest: str
    def __init__(self, path: _Optional[str] = ..., commit: _Optional[str] = ..., dest: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("memory_bytes", "cpus", "pids", "tmp_bytes")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    TMP_BYTES_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpus: float
    pids: int
    tmp_bytes: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpus: _Optional[float] = ..., pids: _Optional[int] = ..., tmp_bytes: _Optional[int] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "workdir", "backend", "isolation", "replica")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workdir: str
    backend: str
    isolation: str
    replica: str
    def __init__(self, session_id: _Optional[str] = ..., workdir: _Optional[str] = ..., backend: _Optional[str] = ..., isolation: _Optional[str] = ..., replica: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("session_id", "command", "cwd", "env", "stdin", "timeout_s", "max_output_bytes", "mode")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    stdin: bytes
    timeout_s: float
    max_output_bytes: int
    mode: ExecMode
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., stdin: _Optional[bytes] = ..., timeout_s: _Optional[float] = ..., max_output_bytes: _Optional[int] = ..., mode: _Optional[_Union[ExecMode, str]] = ...) -> None: ...

class ExecResult(_message.Message):
    __slots__ = ("exit_code", "stdout", "stderr", "timed_out", "stdout_truncated", "stderr_truncated", "duration_s", "oom_killed", "shell_restarted")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    SHELL_RESTARTED_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    oom_killed: bool
    shell_restarted: bool
    def __init__(self, exit_code: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., timed_out: _Optional[bool] = ..., stdout_truncated: _Optional[bool] = ..., stderr_truncated: _Optional[bool] = ..., duration_s: _Optional[float] = ..., oom_killed: _Optional[bool] = ..., shell_restarted: _Optional[bool] = ...) -> None: ...

class WriteFilesRequest(_message.Message):
    __slots__ = ("session_id", "files")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, session_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class WriteFilesResponse(_message.Message):
    __slots__ = ("written",)
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    written: int
    def __init__(self, written: _Optional[int] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "max_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    max_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("content", "truncated")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    truncated: bool
    def __init__(self, content: _Optional[bytes] = ..., truncated: _Optional[bool] = ...) -> None: ...

class RunTestsRequest(_message.Message):
    __slots__ = ("session_id", "command", "timeout_s")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    timeout_s: float
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class TestCaseResult(_message.Message):
    __slots__ = ("name", "outcome", "duration_s", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    outcome: str
    duration_s: float
    message: str
    def __init__(self, name: _Optional[str] = ..., outcome: _Optional[str] = ..., duration_s: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class TestReport(_message.Message):
    __slots__ = ("passed", "failed", "errored", "skipped", "total", "exit_code", "timed_out", "duration_s", "output", "tests")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERRORED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TESTS_FIELD_NUMBER: _ClassVar[int]
    passed: int
    failed: int
    errored: int
    skipped: int
    total: int
    exit_code: int
    timed_out: bool
    duration_s: float
    output: str
    tests: _containers.RepeatedCompositeFieldContainer[TestCaseResult]
    def __init__(self, passed: _Optional[int] = ..., failed: _Optional[int] = ..., errored: _Optional[int] = ..., skipped: _Optional[int] = ..., total: _Optional[int] = ..., exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., duration_s: _Optional[float] = ..., output: _Optional[str] = ..., tests: _Optional[_Iterable[_Union[TestCaseResult, _Mapping]]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...
