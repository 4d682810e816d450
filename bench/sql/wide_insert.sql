-- bench/sql/wide_insert.sql: inserts rows with ids :start .. :start + :n - 1 into a table
-- made by bench/sql/wide_table.sql, in one INSERT ... SELECT over generate_series.
--
--   psql -v name=events -v start=1 -v n=100000 -f bench/sql/wide_insert.sql
--
-- Variables: name (the table), start (first id), n (number of rows).
--
-- Every value is derived from the id alone, so any two runs, on any machine, produce the
-- same rows: two md5s of the id give 8 x 32 pseudo-random bits per row, and an md5 of the
-- session number (id / 25) the per-session values (session and anonymous ids, user,
-- location, device, ip). Timestamps are absolute (independent of the TimeZone setting).
-- The OFFSET 0 fences keep each md5 computed once per row.

\set ON_ERROR_STOP on

INSERT INTO :"name" (
    id, tenant_id, event_type, event_source, session_id, user_ref, anonymous_id, sequence_no,
    occurred_at, received_at, country_code, city, locale, timezone, latitude, longitude,
    ip_address, ua_browser, ua_browser_version, ua_os, ua_os_version, ua_device,
    screen_width, screen_height, viewport_width, viewport_height, app_version,
    page_url, page_path, referrer_url, utm_source, utm_medium, utm_campaign,
    experiment_variant, request_id, http_method, status_code, duration_ms, bytes_sent,
    load_time_s, scroll_depth, item_count, revenue, discount, score,
    is_bot, is_logged_in, is_first_visit, consent_given, properties)
SELECT
    id,
    1 + r1 % 500,
    (ARRAY['page_view', 'page_view', 'page_view', 'page_view', 'click', 'click', 'scroll',
           'search', 'add_to_cart', 'remove_from_cart', 'checkout', 'purchase'])[1 + ev],
    (ARRAY['web', 'web', 'ios', 'android', 'api', 'server'])[1 + (r1 >> 13) % 6],
    substr(hs, 1, 24),
    CASE WHEN logged_in THEN 'usr_' || (rs2 >> 8) % 200000 END,
    substr(hs, 9, 8) || '-' || substr(hs, 17, 4) || '-4' || substr(hs, 21, 3) || '-a'
        || substr(hs, 24, 3) || '-' || substr(hs, 1, 12),
    id % 25,
    occurred_at,
    occurred_at + (r2 % 3000) * interval '1 millisecond',
    (ARRAY['US', 'US', 'US', 'DE', 'GB', 'FR', 'BR', 'IN', 'JP', 'CA',
           'AU', 'NL', 'ES', 'IT', 'MX', 'SE', 'PL', 'KR', 'ZA', 'AR'])[1 + geo],
    (ARRAY['New York', 'San Francisco', 'Chicago', 'Berlin', 'London', 'Paris', 'Sao Paulo',
           'Bengaluru', 'Tokyo', 'Toronto', 'Sydney', 'Amsterdam', 'Madrid', 'Milan',
           'Mexico City', 'Stockholm', 'Warsaw', 'Seoul', 'Cape Town', 'Buenos Aires'])[1 + geo],
    (ARRAY['en-US', 'en-US', 'en-US', 'de-DE', 'en-GB', 'fr-FR', 'pt-BR', 'en-IN', 'ja-JP',
           'en-CA', 'en-AU', 'nl-NL', 'es-ES', 'it-IT', 'es-MX', 'sv-SE', 'pl-PL', 'ko-KR',
           'en-ZA', 'es-AR'])[1 + geo],
    (ARRAY['America/New_York', 'America/Los_Angeles', 'America/Chicago', 'Europe/Berlin',
           'Europe/London', 'Europe/Paris', 'America/Sao_Paulo', 'Asia/Kolkata', 'Asia/Tokyo',
           'America/Toronto', 'Australia/Sydney', 'Europe/Amsterdam', 'Europe/Madrid',
           'Europe/Rome', 'America/Mexico_City', 'Europe/Stockholm', 'Europe/Warsaw',
           'Asia/Seoul', 'Africa/Johannesburg', 'America/Argentina/Buenos_Aires'])[1 + geo],
    (r3 % 1800001 - 900000) / 10000.0::float8,
    (r4 % 3600001 - 1800000) / 10000.0::float8,
    (1 + (rs2 >> 24) % 223) || '.' || (rs2 >> 16) % 256 || '.' || (rs1 >> 24) % 256 || '.' || (rs2 >> 3) % 256,
    (ARRAY['Chrome', 'Chrome', 'Chrome', 'Safari', 'Safari', 'Firefox', 'Edge', 'Samsung Internet'])[1 + r6 % 8],
    (90 + (r6 >> 3) % 40) || '.0.' || (r6 >> 9) % 6000 || '.' || (r6 >> 22) % 200,
    (ARRAY['Windows', 'macOS', 'iOS', 'Android', 'Linux', 'ChromeOS'])[1 + os],
    ((r6 >> 25) % 12 + 5) || '.' || (r6 >> 29) % 8,
    (ARRAY['desktop', 'desktop', 'mobile', 'mobile', 'tablet'])[1 + dev],
    (ARRAY[1920, 1440, 390, 412, 820, 1366])[1 + scr],
    (ARRAY[1080, 900, 844, 915, 1180, 768])[1 + scr],
    (ARRAY[1920, 1440, 390, 412, 820, 1366])[1 + scr] - (r7 >> 5) % 40,
    (ARRAY[1080, 900, 844, 915, 1180, 768])[1 + scr] - 60 - (r7 >> 11) % 120,
    '3.' || (r7 >> 18) % 20 || '.' || (r7 >> 23) % 10,
    'https://shop.example.com' || path,
    path,
    CASE (r8 >> 17) % 4
        WHEN 0 THEN NULL
        WHEN 1 THEN 'https://www.google.com/'
        WHEN 2 THEN 'https://t.co/' || substr(h2, 1, 10)
        ELSE 'https://shop.example.com/'
    END,
    CASE WHEN utm THEN (ARRAY['google', 'newsletter', 'facebook', 'twitter', 'partner'])[1 + (r8 >> 21) % 5] END,
    CASE WHEN utm THEN (ARRAY['cpc', 'email', 'social', 'referral'])[1 + (r8 >> 24) % 4] END,
    CASE WHEN utm THEN 'campaign_' || 2024 + (r8 >> 26) % 3 || '_' || (r4 >> 24) % 40 END,
    (ARRAY['control', 'a', 'b'])[1 + (r2 >> 14) % 3],
    substr(h1, 9, 16),
    (ARRAY['GET', 'GET', 'GET', 'GET', 'POST', 'POST', 'PUT', 'DELETE'])[1 + (r2 >> 16) % 8],
    (ARRAY[200, 200, 200, 200, 200, 200, 201, 204, 301, 304, 404, 500])[1 + (r2 >> 19) % 12]::smallint,
    (r5 % 2500)::int,
    (r3 >> 21) * 64 + r5 % 64,
    (r4 >> 22) % 8000 / 1000.0::float8,
    (r3 >> 8) % 101 / 100.0::float8,
    ((r2 >> 23) % 10)::smallint,
    CASE WHEN ev = 11 THEN (r3 % 50000) / 100.0::float8 END,
    CASE WHEN ev = 11 THEN (r4 % 4) * 0.05::float8 END,
    r7 / 4294967296.0::float8,
    (r7 >> 27) % 20 = 0,
    logged_in,
    id % 25 = 0,
    (r8 >> 29) % 4 <> 0,
    jsonb_build_object(
        'plan', (ARRAY['free', 'free', 'pro', 'team', 'enterprise'])[1 + (r4 >> 27) % 5],
        'cart_size', (r2 >> 23) % 10,
        'dark_mode', (r4 >> 26) % 2 = 1,
        'ref', substr(h2, 17, 8))
FROM (
    SELECT *,
           timestamptz '2024-01-01 00:00:00+00' + id * interval '30 milliseconds' AS occurred_at,
           (r1 >> 9) % 12 AS ev,
           rs1 % 20 AS geo,
           (rs1 >> 5) % 6 AS os,
           (rs1 >> 8) % 5 AS dev,
           (rs1 >> 11) % 6 AS scr,
           (rs1 >> 14) % 3 <> 0 AS logged_in,
           (r8 >> 19) % 3 = 0 AS utm,
           '/' || (ARRAY['products', 'products', 'category', 'search', 'cart', 'checkout', 'blog',
                         'account', 'help', 'deals'])[1 + r8 % 10] || '/' || (r8 >> 4) % 5000 AS path
    FROM (
        SELECT id, h1, h2, hs,
               ('x' || substr(h1, 1, 8))::bit(32)::bigint AS r1,
               ('x' || substr(h1, 9, 8))::bit(32)::bigint AS r2,
               ('x' || substr(h1, 17, 8))::bit(32)::bigint AS r3,
               ('x' || substr(h1, 25, 8))::bit(32)::bigint AS r4,
               ('x' || substr(h2, 1, 8))::bit(32)::bigint AS r5,
               ('x' || substr(h2, 9, 8))::bit(32)::bigint AS r6,
               ('x' || substr(h2, 17, 8))::bit(32)::bigint AS r7,
               ('x' || substr(h2, 25, 8))::bit(32)::bigint AS r8,
               ('x' || substr(hs, 25, 8))::bit(32)::bigint AS rs1,
               ('x' || substr(hs, 17, 8))::bit(32)::bigint AS rs2
        FROM (
            SELECT id, md5('e' || id) AS h1, md5('f' || id) AS h2, md5('s' || id / 25) AS hs
            FROM generate_series((:start)::bigint, (:start)::bigint + (:n) - 1) AS g(id)
            OFFSET 0
        ) hashed
        OFFSET 0
    ) bits
) v;
