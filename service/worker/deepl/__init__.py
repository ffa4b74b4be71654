"""DeepL's API v2 (and the glossary calls of v3) over the same pipeline as LibreTranslate's: its language codes
(languages), the fields of /v2/translate (request), glossaries (glossary: entries and matching; glossaries: where
they are kept), documents (documents: where jobs are kept; runner: how they are translated in the background). The
routes are service.worker.routes.deepl and service.worker.routes.deepl_documents."""
