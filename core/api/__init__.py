"""What every REST resource shares: the error shape (`errors`), paging (`pagination`), reading
posted manifests and the metadata of rendered ones (`manifests`), and the OpenAPI pieces of
every body (`schemas`)."""
