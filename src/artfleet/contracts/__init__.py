"""What travels between the services, beyond the proto messages (`artfleet.v1`, generated
from `proto/`): the trajectory codecs, the step batches and group tasks on Redis, the
checkpoint layout on disk, the model listing's context (`model_listing`), the readable
trajectory records, the errors and their gRPC
statuses, and the figures every reader computes the same way (evaluation, chat messages).

Imports nothing of the kernel's other parts; `codec` and `art_types` need ART's types,
`messages` (the ART-free codec) only protobuf.
"""
