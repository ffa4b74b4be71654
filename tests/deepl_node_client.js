// DeepL's official Node client (deepl-node) against the service: run by tests/test_deepl_node.py with
// DEEPL_SERVER_URL, DEEPL_AUTH_KEY and NODE_PATH set; exits non-zero on the first check that fails.
'use strict';
const assert = require('node:assert/strict');
const deepl = require('deepl-node');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const serverUrl = process.env.DEEPL_SERVER_URL;
const client = new deepl.DeepLClient(process.env.DEEPL_AUTH_KEY, { serverUrl, sendPlatformInfo: false,
    maxRetries: 0 });

async function main() {
    const sources = (await client.getSourceLanguages()).map((l) => l.code).sort();
    assert.deepEqual(sources, ['de', 'en']);
    const targets = (await client.getTargetLanguages()).map((l) => l.code).sort();
    assert.deepEqual(targets, ['de', 'en-GB', 'en-US']);

    const one = await client.translateText('A dog runs in the park.', 'en', 'de');
    assert.equal(one.detectedSourceLang, 'en');
    assert.ok(one.text && one.text !== 'A dog runs in the park.');
    const many = await client.translateText(['A dog runs.', 'Ein Mann schläft.'], null, 'en-US');
    assert.deepEqual(many.map((r) => r.detectedSourceLang), ['en', 'de']);
    assert.equal(many[0].text, 'A dog runs.');

    const html = await client.translateText('<p>A dog runs in the <b>park</b>.</p><p><x>Keep me.</x></p>', 'en',
        'de', { tagHandling: 'html', ignoreTags: ['x'] });
    assert.ok(html.text.includes('<b>') && html.text.includes('<x>Keep me.</x>'), html.text);

    const before = (await client.getUsage()).character.count;
    await client.translateText('Two dogs.', 'en', 'de');
    assert.equal((await client.getUsage()).character.count - before, 'Two dogs.'.length);

    const entries = new deepl.GlossaryEntries({ entries: { dog: 'Köter', park: 'Stadtpark' } });
    const glossary = await client.createGlossary('pets', 'en', 'de', entries);
    assert.equal(glossary.entryCount, 2);
    assert.ok((await client.listGlossaries()).some((g) => g.glossaryId === glossary.glossaryId));
    assert.equal((await client.getGlossary(glossary.glossaryId)).name, 'pets');
    assert.deepEqual((await client.getGlossaryEntries(glossary)).entries(), { dog: 'Köter', park: 'Stadtpark' });
    const used = await client.translateText('A dog runs in the park.', 'en', 'de', { glossary });
    assert.ok(used.text.includes('Köter') && used.text.includes('Stadtpark'), used.text);
    const csv = await client.createGlossaryWithCsv('csv', 'de', 'en', Buffer.from('Hund,hound\nPark,garden\n'));
    assert.equal(csv.entryCount, 2);
    await client.deleteGlossary(glossary);
    await client.deleteGlossary(csv);
    await assert.rejects(client.getGlossary(glossary.glossaryId), deepl.GlossaryNotFoundError);
    await assert.rejects(client.createGlossary('bad', 'en', 'fr', entries), deepl.DeepLError);

    const dictionaries = [
        { sourceLangCode: 'en', targetLangCode: 'de', entries: new deepl.GlossaryEntries({ entries: { dog: 'Köter' } }) },
        { sourceLangCode: 'de', targetLangCode: 'en', entries: new deepl.GlossaryEntries({ entries: { Hund: 'hound' } }) },
    ];
    const multi = await client.createMultilingualGlossary('both ways', dictionaries);
    assert.equal(multi.dictionaries.length, 2);
    assert.ok((await client.listMultilingualGlossaries()).some((g) => g.glossaryId === multi.glossaryId));
    const read = await client.getMultilingualGlossaryDictionaryEntries(multi, 'de', 'en');
    assert.deepEqual(read.entries.entries(), { Hund: 'hound' });
    const renamed = await client.updateMultilingualGlossaryName(multi, 'renamed');
    assert.equal(renamed.name, 'renamed');
    await client.updateMultilingualGlossaryDictionary(multi, { sourceLangCode: 'en', targetLangCode: 'de',
        entries: new deepl.GlossaryEntries({ entries: { park: 'Stadtpark' } }) });
    const merged = await client.getMultilingualGlossaryDictionaryEntries(multi, 'en', 'de');
    assert.deepEqual(merged.entries.entries(), { dog: 'Köter', park: 'Stadtpark' });
    await client.replaceMultilingualGlossaryDictionary(multi, { sourceLangCode: 'en', targetLangCode: 'de',
        entries: new deepl.GlossaryEntries({ entries: { cat: 'Mieze' } }) });
    const replaced = await client.getMultilingualGlossaryDictionaryEntries(multi, 'en', 'de');
    assert.deepEqual(replaced.entries.entries(), { cat: 'Mieze' });
    const hound = await client.translateText('Der Hund schläft.', 'de', 'en-GB', { glossary: multi });
    assert.ok(hound.text.includes('hound'), hound.text);
    await client.deleteMultilingualGlossaryDictionary(multi, 'de', 'en');
    assert.equal((await client.getMultilingualGlossary(multi.glossaryId)).dictionaries.length, 1);
    await client.deleteMultilingualGlossary(multi);
    await assert.rejects(client.getMultilingualGlossary(multi.glossaryId), deepl.GlossaryNotFoundError);

    const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'deepl-node-'));
    fs.writeFileSync(path.join(folder, 'story.txt'), 'A dog runs in the park.\n\nTwo men are talking.\n');
    const status = await client.translateDocument(path.join(folder, 'story.txt'), path.join(folder, 'story.de.txt'),
        'en', 'de');
    assert.ok(status.done() && status.billedCharacters === 43, JSON.stringify(status));
    assert.ok(fs.readFileSync(path.join(folder, 'story.de.txt'), 'utf8').includes('Hund'));

    const wrong = new deepl.DeepLClient('wrong-key', { serverUrl, sendPlatformInfo: false, maxRetries: 0 });
    await assert.rejects(wrong.getUsage(), deepl.AuthorizationError);
    await assert.rejects(client.translateText('A dog.', 'en', 'fr'), deepl.DeepLError);
    console.log('deepl-node: every check passed');
}

main().catch((error) => {
    console.error(error);
    process.exit(1);
});
