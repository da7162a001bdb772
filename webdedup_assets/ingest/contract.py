"""The input contract: the columns every document has, and their typed Arrow schema."""

import pyarrow as pa

CONTRACT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("domain", pa.string()),
        ("crawled_at", pa.date32()),
        ("title", pa.string()),
        ("body", pa.string()),
    ]
)
REQUIRED_COLUMNS = tuple(CONTRACT_SCHEMA.names)
